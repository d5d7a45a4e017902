"""List the server's model versions, roll back without a server, export one version as a folder.

`umind versions WORKDIR` reads what the UMind server keeps in its workdir (conf `workdir`; by default
STUDIES/.umind): every run with its status, reason and per-task gate table, the served version, and where each
version's base model is. `--rollback N` serves version N from the next request of a running server (it re-reads
versions.json) or from its next start; a version the gate rejected needs `--force`. `--export N DIR` writes
version N's adapter, decoder, processor, config and base reference (base_ref.json: the hash of the base's weights)
into DIR, one folder that `umind infer --model DIR` loads while the base is where its config says.

The rules are the server's own (umind_core/versions.py, which the server uses), so an offline rollback refuses what a
`POST /train/umind_lora {"rollback": N}` refuses; and, as the server does when it loads one, the listing points a
version whose base moved at the base's new place (found by its weight hash, `--model` and the demo model searched).
Bad input exits with status 2 and one line saying why.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NAME = "versions"
HELP = "list the server's model versions (status, gate tables), roll back offline, or export one"


def _version(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a version number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a version number >= 0, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workdir", help="the server's workdir (conf workdir; default STUDIES/.umind)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--rollback", type=_version, metavar="N", help="serve version N from now on")
    action.add_argument("--export", nargs=2, metavar=("N", "DIR"), help="write version N into the new folder DIR")
    parser.add_argument("--force", action="store_true", help="with --rollback: serve a version the gate rejected")
    parser.add_argument("--model", help="the server's conf model folder, searched for a version's base when it is "
                                        "not where it was saved (the bundled demo model is always searched)")
    parser.add_argument("--json", action="store_true", help="print the listing as JSON")


def _store(args: argparse.Namespace):
    from umind_core.versions import VersionStore
    from umind_core.demo import DEMO_MODEL_DIR

    workdir = Path(args.workdir).expanduser()
    if not workdir.is_dir():
        raise FileNotFoundError(f"workdir {workdir} does not exist or is not a folder")
    if not (workdir / "versions.json").is_file() and not (workdir / "versions").is_dir():
        raise ValueError(f"{workdir} is not a UMind workdir: it has neither versions.json nor versions/ (the "
                         "server's conf workdir, by default STUDIES/.umind)")
    if args.model and not Path(args.model).expanduser().is_dir():
        raise FileNotFoundError(f"--model {args.model} is not a folder")
    search = ([Path(args.model).expanduser().resolve()] if args.model else []) + [DEMO_MODEL_DIR]
    return VersionStore(workdir.resolve(), search_paths=search)


def _indent(text: str, prefix: str = "      ") -> str:
    return "\n".join(prefix + line for line in str(text).splitlines())


def _run_lines(run: dict) -> list[str]:
    """A run record as the listing shows it: one header line, its reason or error, its gate table."""
    status = run.get("status")
    if status == "rollback":
        forced = " (forced: the gate rejected it)" if run.get("forced") else ""
        return [f"  rollback {run.get('from')} -> {run.get('to')}{forced}  {run.get('recorded', '')}"]
    head = f"  run {run.get('version')}: {status}"
    if run.get("seconds") is not None:
        head += f" in {run['seconds']} s"
    head += f"  {run.get('recorded') or run.get('started') or ''}"
    lines = [head.rstrip()]
    if run.get("reason"):
        lines.append(f"    {run['reason']}")
    if run.get("error"):
        lines.append(f"    error: {run['error']}")
    if run.get("gate_table"):
        lines.append(_indent(run["gate_table"]))
    return lines


def _listing(store) -> dict:
    summary = store.summary()
    summary["bases"] = {v: store.base_status(v) for v in summary["available_versions"]}
    return summary


def _print_listing(store, summary: dict) -> None:
    current = summary["current_version"]
    forced = " (a forced rollback: the gate rejected it)" if summary.get("current_forced") else ""
    print(f"umind versions: {store.workdir}")
    print(f"served: version {current}{forced}")
    print("versions:")
    for v in summary["available_versions"]:
        status = "start" if v == 0 else (store.run_of(v) or {}).get("status", "?")
        print(f"  {'*' if v == current else ' '} {v:>4}  {status:<9} base: {summary['bases'][v]}")
    print("runs:" if summary["runs"] else "runs: none yet")
    for run in summary["runs"]:
        print("\n".join(_run_lines(run)))
    for warning in summary.get("warnings", []):
        print(f"warning: {warning}")


def run(args: argparse.Namespace) -> int:
    if args.force and args.rollback is None:
        raise ValueError("--force goes with --rollback N")
    store = _store(args)
    if args.rollback is not None:
        out = store.rollback(args.rollback, force=args.force)
        note = " (forced)" if out["forced"] else ""
        print(f"umind versions: serving version {out['current_version']}{note} (was {out['rolled_back_from']}); a "
              "running server uses it from its next request")
        return 0
    if args.export:
        version = _version_arg(args.export[0])
        dest = store.export(version, Path(args.export[1]))
        print(f"umind versions: exported version {version} to {dest}")
        return 0
    summary = _listing(store)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        _print_listing(store, summary)
    return 0


def _version_arg(text: str) -> int:
    try:
        return _version(text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"--export: {exc}") from None
