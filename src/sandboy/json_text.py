"""JSON text exactly as `json.dumps(value, indent=2)` writes it, without importing `json`.

Why: `json` imports `re` (and with it `enum`, `functools`, `collections`, ...) and compiles its
patterns at import: ≈ 28 M instructions, ≈ 8 ms of CPU — more than the rest of a `sandboy run`'s
start-up (docs/performance.md, session 7). `sandboy run --status-json` writes one small document
per run, so it writes it with this. The text is json.dumps's, byte for byte, for every value
json.dumps accepts without options (tests/test_json_text.py compares the two); anything else is
the TypeError json.dumps raises.
"""

_SHORT = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_INFINITY = float("inf")


def string(text: str) -> str:
    """A JSON string, ASCII only (json.dumps's default `ensure_ascii=True`)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return '"' + text + '"'  # printable ASCII is " " to "~": nothing to escape (+: a str subclass's own text)
    out = []
    for char in text:
        if char in _SHORT:
            out.append(_SHORT[char])
        elif " " <= char <= "~":
            out.append(char)
        else:
            code = ord(char)
            if code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:  # as a UTF-16 surrogate pair
                code -= 0x10000
                out.append(f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}")
    return '"' + "".join(out) + '"'


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)


def _key(key) -> str:
    if isinstance(key, str):
        return string(key)
    if key is True:
        return '"true"'
    if key is False:
        return '"false"'
    if key is None:
        return '"null"'
    if isinstance(key, int):
        return f'"{int.__repr__(key)}"'
    if isinstance(key, float):
        return f'"{_float(key)}"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _encode(value, level: int, out: list) -> None:
    if isinstance(value, str):
        out.append(string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        inner = "\n" + "  " * (level + 1)
        out.append("[")
        for i, item in enumerate(value):
            out.append(inner if i == 0 else "," + inner)
            _encode(item, level + 1, out)
        out.append("\n" + "  " * level + "]")
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = "\n" + "  " * (level + 1)
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append((inner if i == 0 else "," + inner) + _key(key) + ": ")
            _encode(item, level + 1, out)
        out.append("\n" + "  " * level + "}")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value) -> str:
    """`json.dumps(value, indent=2)`."""
    out: list = []
    _encode(value, 0, out)
    return "".join(out)
