"""Which FlashInfer releases carry the two bugs attnbench refuses around, and the refusals' text.

Each is written up as an upstream report (docs/kernels/flashinfer-bug-*.md):

- `pod-memset`: POD zeroes its CTA-scheduler counters with a cudaMemset on the legacy stream
  (include/flashinfer/attention/pod.cuh), so a captured CUDA graph does not replay it;
- `ba-int32`: BatchAttention's persistent kernel forms a page's element offset as a 32-bit product
  (include/flashinfer/attention/persistent.cuh, prefetch_offest), so a paged cache past 2^32 K
  elements is read at wrapped offsets.

How each version is known: by measurement on the H200 (both bugs on 0.6.6 and on 0.7.2.post1, with
benchmarks/repro_fi_pod_memset.py and repro_fi_ba_int32.py), else by reading the sources of 0.7.2.post1 and
0.7.4 (the same lines; releases between 0.6.6 and 0.7.4 are assumed to share them); a newer release
is assumed to carry a bug until a release is known to fix it. When one does, set the bug's
`fixed_in`: that release and later ones run.
"""

from __future__ import annotations

import dataclasses

from packaging.version import InvalidVersion, Version

MEASURED = Version("0.6.6")  # the release both bugs were first measured on (docs/measurements/h200/kernel.md)
READ = (Version("0.7.2"), Version("0.7.4"))  # releases whose sources were read: the same lines


@dataclasses.dataclass(frozen=True)
class Bug:
    """One FlashInfer bug: what it does (after "flashinfer <version>: "), its report, its fix."""

    what: str
    report: str
    fixed_in: str | None = None  # the first release whose source fixes it; None: none known
    measured_on: tuple[str, ...] = (str(MEASURED),)  # releases (base versions) it was measured on

    def refusal(self, version: str) -> str | None:
        """Why `version` (a flashinfer __version__, or "unknown") cannot run the case, or None."""
        parsed = parse(version)
        if parsed is not None and self.fixed_in is not None and parsed >= Version(self.fixed_in):
            return None  # (a release candidate of fixed_in comes before it: refused)
        seen = None if parsed is None else Version(parsed.base_version)  # 0.7.2.post1, 0.6.6+fake: 0.7.2, 0.6.6
        return f"flashinfer {version}: {self.what} ({evidence(seen, self.measured_on)}; {self.report})"


def parse(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def evidence(seen: Version | None, measured_on: tuple[str, ...] = (str(MEASURED),)) -> str:
    """How a release is known to carry a bug: measured, read in its source, or assumed."""
    if seen is not None and seen in {Version(v) for v in measured_on}:
        return "measured"
    if seen in READ:
        return f"same source as {MEASURED}, by reading it"
    if seen is not None and MEASURED < seen < READ[-1]:
        return f"not read; {MEASURED} and {READ[-1]} have the same source"
    return f"not checked; no fix known up to {READ[-1]}"


BUGS = {
    "pod-memset": Bug("POD zeroes its scheduler counters with a cudaMemset on the legacy stream (pod.cuh), "
                      "which a captured CUDA graph does not replay", "docs/kernels/flashinfer-bug-pod-memset.md",
                      measured_on=(str(MEASURED), "0.7.2")),
    "ba-int32": Bug("BatchAttention computes page offsets in 32 bits (persistent.cuh), so it reads wrong keys "
                    "past 2^32 K elements", "docs/kernels/flashinfer-bug-ba-int32.md",
                    measured_on=(str(MEASURED), "0.7.2")),
}
