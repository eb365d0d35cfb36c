"""The honest part of the demo repository: a tiny library with a test suite."""


def add(a: int, b: int) -> int:
    return a + b


def mean(values: list[float]) -> float:
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)
