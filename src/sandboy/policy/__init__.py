"""The step-policy model (docs/design.md, "Step policy"): load, validate, resolve, meet.

Kept free of `re`, `dataclasses`, `typing` and `json` at import time: this package sits on the
`sandboy run` start-up path, where each of those costs milliseconds (docs/performance.md).
"""
