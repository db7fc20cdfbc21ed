"""Rendering an `Outcome` as text, JSON, GitHub workflow commands or SARIF 2.1.0."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tools.ratchet.baseline import Outcome
from tools.ratchet.rules import RULES_BY_KIND
from tools.ratchet.sites import KINDS, Site

FORMATS = ("text", "json", "github", "sarif")

# problems that are not a kind of read, each a SARIF rule of its own
EXTRA_RULES: dict[str, str] = {
    "baseline-progress": "counts fell below the baseline; run `sgconf-ratchet update` to lock in the progress",
    "stale-allow": "a `# ratchet: allow(...)` comment on a line with no raw read",
    "allow-without-reason": "a `# ratchet: allow` comment without its mandatory reason",
    "stale-exempt": "an [[exempt]] entry in ratchet.toml that matches no read",
}

Accessors = Mapping[str, "str | None"]


WRITE_ADVICE = "change it through an override, never on the record"
COMPUTED_ADVICE = "read the field by name through the context (get_context().value(name))"


def advice(site: Site, accessors: Accessors) -> str:
    """The sanctioned alternative: the field's accessor for a read, an override for a write."""
    if site.kind == "write":
        return WRITE_ADVICE
    if site.kind == "computed":
        return COMPUTED_ADVICE
    accessor = accessors.get(site.field)
    return f"use {accessor}" if accessor else "use the field's accessor"


def site_line(site: Site, accessors: Accessors) -> str:
    """One line per site, in the `path:line:col: message` form editors and CI logs link."""
    what = "written raw" if site.kind == "write" else f"read raw ({site.kind})"
    return f"{site.path}:{site.line}:{site.col}: field '{site.field}' {what} -- {advice(site, accessors)}"


def rose_message(path: str, kind: str, baseline: int, observed: int, record_type: str = "ServerArgs") -> str:
    what = "raw writes" if kind == "write" else f"raw {kind} reads"
    return f"{what} of {record_type} fields rose in {path}: {baseline} \u2192 {observed}"


def progress_message(path: str, fixed: int) -> str:
    noun = "site" if fixed == 1 else "sites"
    return f"{fixed} {noun} fixed in {path}; run `sgconf-ratchet update` to lock in the progress"


def _what(site: Site) -> str:
    if site.kind == "write":
        return f"raw write of '{site.field}'"
    return f"raw {site.kind} read of '{site.field}'"


def _items(outcome: Outcome, accessors: Accessors, config_name: str) -> list[dict[str, Any]]:
    """Every problem as one flat dict (rule, path, line, col, message), in report order."""
    items: list[dict[str, Any]] = []
    for reg in outcome.regressions:
        for site in reg.sites:
            items.append(
                {
                    "rule": site.kind,
                    "path": site.path,
                    "line": site.line,
                    "col": site.col,
                    "field": site.field,
                    "accessor": accessors.get(site.field),
                    "message": f"{_what(site)} ({reg.kind} count {reg.observed}, "
                    f"baseline {reg.baseline}) -- {advice(site, accessors)}",
                }
            )
    for prog in outcome.progress:
        items.append(
            {
                "rule": "baseline-progress",
                "path": prog.path,
                "line": None,
                "col": None,
                "message": progress_message(prog.path, prog.fixed),
                "kinds": {kind: {"baseline": b, "observed": o} for kind, b, o in prog.kinds},
            }
        )
    for allow in outcome.stale_allows:
        items.append(
            {
                "rule": "stale-allow",
                "path": allow.path,
                "line": allow.line,
                "col": allow.col,
                "message": "allow comment with no raw read on its line -- remove the comment",
            }
        )
    for allow in outcome.missing_reasons:
        items.append(
            {
                "rule": "allow-without-reason",
                "path": allow.path,
                "line": allow.line,
                "col": allow.col,
                "message": "allow comment without a reason -- write `# ratchet: allow(<why this raw read is needed>)`",
            }
        )
    for entry in outcome.stale_exempts:
        items.append(
            {
                "rule": "stale-exempt",
                "path": config_name,
                "line": None,
                "col": None,
                "message": f"[[exempt]] path '{entry.path}' field '{entry.field}' matches no read -- remove the entry",
            }
        )
    return items


def render(
    outcome: Outcome,
    fmt: str,
    accessors: Accessors,
    *,
    version: str = "",
    config_name: str = "ratchet.toml",
    record_type: str = "ServerArgs",
) -> str:
    if fmt == "json":
        return render_json(outcome, accessors, config_name)
    if fmt == "github":
        return render_github(outcome, accessors, config_name)
    if fmt == "sarif":
        return render_sarif(outcome, accessors, version, config_name)
    return render_text(outcome, accessors, config_name, record_type)


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def summary_line(outcome: Outcome) -> str:
    """The true totals: files checked, counted sites and the files holding them, then what failed."""
    counted_files = len({s.path for s in outcome.counted})
    head = (
        f"sgconf-ratchet: {_plural(len(outcome.scans), 'file')} checked, "
        f"{_plural(len(outcome.counted), 'counted site')} in {_plural(counted_files, 'file')}"
    )
    parts = []
    if outcome.regressions:
        over = sum(r.observed - r.baseline for r in outcome.regressions)
        files = len({r.path for r in outcome.regressions})
        parts.append(f"{over} over the baseline in {_plural(files, 'file')}")
    if outcome.progress:
        parts.append(f"{_plural(len(outcome.progress), 'file')} below the baseline")
    if outcome.stale_allows:
        parts.append(_plural(len(outcome.stale_allows), "stale allow comment"))
    if outcome.missing_reasons:
        parts.append(_plural(len(outcome.missing_reasons), "allow comment") + " without a reason")
    if outcome.stale_exempts:
        parts.append(_plural(len(outcome.stale_exempts), "stale exemption"))
    if outcome.errors:
        parts.append(_plural(len(outcome.errors), "file") + " that could not be checked")
    return head + (": " + ", ".join(parts) if parts else ": ok")


def render_text(outcome: Outcome, accessors: Accessors, config_name: str, record_type: str = "ServerArgs") -> str:
    lines: list[str] = []
    for reg in outcome.regressions:
        lines.extend(site_line(site, accessors) for site in reg.sites)
        lines.append(rose_message(reg.path, reg.kind, reg.baseline, reg.observed, record_type))
    for prog in outcome.progress:
        lines.append(progress_message(prog.path, prog.fixed))
    for allow in outcome.stale_allows:
        lines.append(
            f"{allow.path}:{allow.line}:{allow.col}: allow comment with no raw read on its line -- remove the comment"
        )
    for allow in outcome.missing_reasons:
        lines.append(
            f"{allow.path}:{allow.line}:{allow.col}: allow comment without a reason "
            "-- write `# ratchet: allow(<why this raw read is needed>)`"
        )
    for entry in outcome.stale_exempts:
        lines.append(
            f"{config_name}: [[exempt]] path '{entry.path}' field '{entry.field}' matches no read -- remove the entry"
        )
    for scan in outcome.errors:
        lines.append(f"{scan.path}: {scan.error}")
    lines.append(summary_line(outcome))
    return "\n".join(lines)


def render_json(outcome: Outcome, accessors: Accessors, config_name: str) -> str:
    data = {
        "exit_code": outcome.exit_code,
        "files": len(outcome.scans),
        "counted": len(outcome.counted),
        "problems": _items(outcome, accessors, config_name),
        "errors": [{"path": s.path, "error": s.error} for s in outcome.errors],
    }
    return json.dumps(data, indent=2, sort_keys=True)


def _gh_escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def render_github(outcome: Outcome, accessors: Accessors, config_name: str) -> str:
    lines = []
    problems = _items(outcome, accessors, config_name)
    problems += [
        {"rule": "parse-error", "path": s.path, "line": None, "col": None, "message": s.error} for s in outcome.errors
    ]
    for item in problems:
        props = [f"file={_gh_escape(item['path'], prop=True)}"]
        if item["line"] is not None:
            props.append(f"line={item['line']}")
            props.append(f"col={item['col']}")
        props.append(f"title={_gh_escape('ratchet ' + item['rule'], prop=True)}")
        lines.append(f"::error {','.join(props)}::{_gh_escape(item['message'])}")
    return "\n".join(lines)


def sarif_rules() -> list[dict[str, Any]]:
    rules = []
    for kind in KINDS:
        rule = RULES_BY_KIND[kind]
        rules.append(_sarif_rule(kind, rule.summary))
    for rule_id, text in EXTRA_RULES.items():
        rules.append(_sarif_rule(rule_id, text))
    return rules


def _sarif_rule(rule_id: str, text: str) -> dict[str, Any]:
    name = "".join(part.capitalize() for part in rule_id.split("-"))
    return {
        "id": rule_id,
        "name": name,
        "shortDescription": {"text": text},
        "defaultConfiguration": {"level": "error"},
    }


def _location(path: str, line: int | None, col: int | None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": path, "uriBaseId": "%SRCROOT%"}}
    if line is not None:
        physical["region"] = {"startLine": line, "startColumn": col or 1}
    return {"physicalLocation": physical}


def render_sarif(outcome: Outcome, accessors: Accessors, version: str, config_name: str) -> str:
    rules = sarif_rules()
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = []
    for item in _items(outcome, accessors, config_name):
        results.append(
            {
                "ruleId": item["rule"],
                "ruleIndex": index[item["rule"]],
                "level": "error",
                "message": {"text": item["message"]},
                "locations": [_location(item["path"], item["line"], item["col"])],
            }
        )
    notifications = [
        {"level": "error", "message": {"text": scan.error}, "locations": [_location(scan.path, None, None)]}
        for scan in outcome.errors
    ]
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "sgconf-ratchet", "version": version or "0", "rules": rules}},
                "invocations": [
                    {"executionSuccessful": not outcome.errors, "toolExecutionNotifications": notifications}
                ],
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2)
