"""Run every benchmark (B1-B17) and write BENCHMARKS.md: machine, versions and tables."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import (
    BENCH_DIR,
    DATA_DIR,
    PYTHON,
    ROOT,
    Section,
    bench_env,
    machine,
    markdown_table,
    versions,
)

ANALYSIS = BENCH_DIR / "ANALYSIS.md"
SCRIPTS = {
    "B1": "b01_inline.py",
    "B1-base": "b01_versus_base.py",
    "B2": "b02_flaky.py",
    "B3": "b03_queued.py",
    "B4": "b04_fanout.py",
    "B5": "b05_long_runs.py",
    "B6": "b06_sleepers.py",
    "B7": "b07_soak.py",
    "B8": "b08_api_scale.py",
    "B9": "b09_console_scale.py",
    "B10": "b10_graph_cycles.py",
    "B11": "b11_graph_layout.py",
    "B12": "b12_replay_check.py",
    "B13": "b13_schedules.py",
    "B14": "b14_events.py",
    "B15": "b15_concurrency.py",
    "B16": "b16_step_limits.py",
    "B17": "b17_dashboard.py",
}


def run_one(bench: str, size: str) -> tuple[Section | None, str]:
    """Run one benchmark script; its section, or None and the error output."""
    out = DATA_DIR / f"{bench.lower()}-{size}.json"
    out.unlink(missing_ok=True)
    proc = subprocess.run(
        [PYTHON, str(BENCH_DIR / SCRIPTS[bench]), "--size", size, "--json", str(out)],
        env=bench_env(), cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if out.exists():
        return Section.from_json(json.loads(out.read_text())), ""
    return None, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


def render(sections: dict[str, Section | None], errors: dict[str, str], size: str,
           seconds: float, *, rewritten: bool = False) -> str:
    """The whole BENCHMARKS.md (``rewritten``: from the results of earlier runs)."""
    written = (
        f"Assembled by `benchmarks/run_all.py --rewrite` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC from the results each benchmark's last "
        "run left in `benchmarks/.data` "
        f"({seconds / 60:.1f} minutes of runs; which run each comes from: the analysis "
        "below)." if rewritten else
        f"Written by `make bench` (`benchmarks/run_all.py --size {size}`) on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC in {seconds / 60:.1f} minutes.")
    lines = [
        "# Benchmarks",
        "",
        f"{written} Each "
        "benchmark runs its peer in the same script, on the same database server, in the "
        "same run; on these shared 2-core machines the ratios matter, not the absolute "
        "times. What each benchmark does and why: `benchmarks/README.md`.",
        "",
        "## Machine and versions",
        "",
    ]
    facts = {**machine(), **versions()}
    lines += markdown_table(["", ""], facts.items())
    lines += ["", "## Targets", ""]
    rows = []
    for bench, section in sections.items():
        if section is None:
            rows.append([bench, "the benchmark failed to run", "", "", "FAILED"])
            continue
        for t in section.targets:
            rows.append([bench, t.name, f"{_num(t.measured)} {t.unit}".strip(),
                         f"{t.op} {_num(t.limit)} {t.unit}".strip(), t.verdict()])
        if section.problems:
            rows.append([bench, "correctness", f"{len(section.problems)} problems", "none",
                         "FAILED"])
    lines += markdown_table(["bench", "target", "measured", "limit", "verdict"], rows)
    lines.append("")
    # Where the time goes and why a target is missed or close: by hand, kept with the code.
    if ANALYSIS.exists():
        lines += [ANALYSIS.read_text().strip(), ""]
    for bench, section in sections.items():
        if section is None:
            lines += [f"## {bench}: failed to run", "", "```", errors[bench].strip(), "```", ""]
        else:
            lines.append(section.markdown())
    return "\n".join(lines).rstrip() + "\n"


def _num(value: float) -> str:
    from benchmarks.harness import fmt

    return fmt(value)


def rewrite(output: Path, size: str, benches: list[str]) -> None:
    """Write ``output`` from the results the last run left in ``benchmarks/.data``."""
    sections: dict[str, Section | None] = {}
    for bench in benches:
        path = DATA_DIR / f"{bench.lower()}-{size}.json"
        sections[bench] = Section.from_json(json.loads(path.read_text())) if path.exists() \
            else None
    seconds = sum(s.seconds for s in sections.values() if s is not None)
    errors = {bench: "no results: run it first" for bench, s in sections.items() if s is None}
    output.write_text(render(sections, errors, size, seconds, rewritten=True))
    print(f"wrote {output} from the results in {DATA_DIR}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=("tiny", "full"), default="full")
    parser.add_argument("--only", nargs="+", choices=sorted(SCRIPTS), metavar="BN",
                        help="run only these benchmarks (B1 ... B7)")
    parser.add_argument("--rewrite", action="store_true",
                        help="only write the file again from the last run's results in "
                             "benchmarks/.data (after editing benchmarks/ANALYSIS.md)")
    parser.add_argument("--output", type=Path,
                        help="where to write (default: BENCHMARKS.md at the repository root "
                             "for --size full, benchmarks/.data/BENCHMARKS-tiny.md otherwise)")
    args = parser.parse_args()
    output = args.output or (ROOT / "BENCHMARKS.md" if args.size == "full"
                             else DATA_DIR / "BENCHMARKS-tiny.md")
    DATA_DIR.mkdir(exist_ok=True)
    if args.rewrite:
        rewrite(output, args.size, args.only or list(SCRIPTS))
        return
    started = time.monotonic()
    sections: dict[str, Section | None] = {}
    errors: dict[str, str] = {}
    for bench in args.only or list(SCRIPTS):
        began = time.monotonic()
        print(f"{bench} ({SCRIPTS[bench]}, {args.size}) ...", end=" ", flush=True)
        sections[bench], errors[bench] = run_one(bench, args.size)
        section = sections[bench]
        state = "FAILED" if section is None or section.problems else "ok"
        print(f"{state} in {time.monotonic() - began:.0f} s", flush=True)
        if section is None:
            print(errors[bench], file=sys.stderr)
    output.write_text(render(sections, errors, args.size, time.monotonic() - started))
    print(f"wrote {output} in {(time.monotonic() - started) / 60:.1f} minutes")
    if any(s is None or s.problems for s in sections.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
