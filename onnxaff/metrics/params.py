"""Metric specs: `name` or `name:key=value:key=value`, checked against the constructor's keywords.

Values read as a bool (true/false), a whole number, a number, else text; each is then checked against the
kind of the parameter's default, so `eps=abc` or `shrinkage=3` is one line naming the metric and what it takes.
"""

from __future__ import annotations

import math

from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.foundations.text import did_you_mean
from onnxaff.metrics.output import plugin_output

SYNTAX = "name:key=value:key=value"


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """(registered name, {key: value text}) of one --metrics item."""
    name, *parts = [p.strip() for p in str(spec).split(":")]
    given: dict[str, str] = {}
    for part in parts:
        key, eq, value = (t.strip() for t in part.partition("="))
        if not eq or not key or not value:
            raise ConfigError("metrics", f"{{option}}: metric {spec!r}: {part!r} is not key=value (syntax: {SYNTAX})")
        if key in given:
            raise ConfigError("metrics", f"{{option}}: metric {spec!r} sets {key!r} twice")
        given[key] = value
    return name, given


def canonical_name(name: str, values: dict, defaults: dict) -> str:
    """`name:key=value` with the keys sorted, values written one way and defaults left out: two spellings of
    one metric (`eps=1e-5`, `eps=0.00001`; `affinity:eps=1e-6` and `affinity`) are one column, one key."""
    def text(v) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else repr(v) if isinstance(v, float) else str(v)

    changed = [(k, v) for k, v in sorted(values.items()) if not (type(v) is type(defaults.get(k)) and
                                                                  v == defaults.get(k))]
    return ":".join([name, *(f"{k}={text(v)}" for k, v in changed)])


def parse_value(text: str):
    """true/false, a whole number, a number, else the text itself."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def accepted(cls) -> str:
    params = cls.parameters()
    return ", ".join(f"{k}={v!r}" for k, v in params.items()) if params else "none"


def _coerce(spec: str, cls, key: str, text: str):
    """The value of `key` as the kind its default is (a bool, a number, text); anything else goes as read."""
    default, value = cls.parameters()[key], parse_value(text)
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    elif isinstance(default, str):
        ok, value = True, text
    else:
        ok = True
    if not ok:
        kind = ("true or false" if isinstance(default, bool) else "a whole number" if isinstance(default, int)
                else "a finite number")
        raise ConfigError("metrics", f"{{option}}: metric {spec!r}: {key} must be {kind}, got {text!r}; {cls.name} "
                                     f"accepts {accepted(cls)}")
    return value


def build(spec: str, available: dict):
    """One metric instance; its `spec` is the spec written one way (the signature entry's key)."""
    name, given = parse_spec(spec)
    if name not in available:
        raise ConfigError("metrics", f"{{option}}: unknown metric {name!r}; available: {', '.join(sorted(available))}"
                                     + did_you_mean(name, available))
    reg = available[name]
    unknown = [k for k in given if k not in reg.cls.parameters()]
    if unknown:
        raise ConfigError("metrics", f"{{option}}: metric {name!r} has no parameter {unknown[0]!r}; it accepts "
                                     f"{accepted(reg.cls)}" + did_you_mean(unknown[0], reg.cls.parameters()))
    kwargs = {k: _coerce(spec, reg.cls, k, v) for k, v in given.items()}
    try:
        with plugin_output():
            metric = reg.cls(**kwargs)
    except (Exception, SystemExit) as exc:
        if kwargs and isinstance(exc, (ValueError, TypeError)):
            raise ConfigError("metrics", f"{{option}}: metric {spec!r}: {exc}; {name} accepts "
                                         f"{accepted(reg.cls)}") from None
        raise OnnxaffError(f"metric {name!r} ({reg.origin}) failed to start: {type(exc).__name__}: {exc}") from None
    hidden = [k for k in kwargs if not hasattr(metric, k)]
    if hidden:  # params() reads the attribute: without it the signature would record the default
        raise OnnxaffError(f"metric {name!r} ({reg.origin}) keeps its parameter {hidden[0]!r} under another name; "
                           f"store each constructor keyword as an attribute of the same name (scikit-learn's rule)")
    if given:
        metric.spec = canonical_name(name, kwargs, reg.cls.parameters())
    return metric
