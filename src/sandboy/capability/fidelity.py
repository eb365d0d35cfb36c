"""The fidelity table: for each rule of the policy and each target, what that target does with
it — "enforced" (something stops a shell too), "advisory" (the agent honours it, nothing stops
a shell), "lost" (the format cannot say it) — and why."""

from sandboy.capability.targets import TARGETS


def table(policy) -> list:
    """[{rule, key, target, status, reason}] in policy order, then target order."""
    rows = []
    for name in policy.targets:
        for key, text, status, reason in TARGETS[name].fidelity(policy):
            rows.append({"key": key, "rule": text, "target": name, "status": status, "reason": reason})
    order = {}
    for row in rows:
        order.setdefault((row["key"], row["rule"]), len(order))
    return sorted(rows, key=lambda r: order[(r["key"], r["rule"])])


def render_text(rows) -> str:
    from sandboy.escape import clean

    lines = []
    last = None
    for row in rows:
        head = (row["key"], row["rule"])
        if head != last:
            lines.append(f"{row['key']} = {clean(row['rule'])}")
            last = head
        lines.append(f"    {row['target']:<12} {row['status']:<9} {clean(row['reason'])}")
    return "\n".join(lines)
