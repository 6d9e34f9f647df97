"""`forge-record doctor --engine URL`: what an engine upstream gives a trainer.

It probes the engine (forge_record.engine_probe: which one, its version, its models), then
tells raw from processed logprobs. vLLM's default `logprobs_mode` is raw: logprobs of the
model's distribution before temperature, top-k and top-p, which are not the probabilities
the tokens were sampled with, so policy-gradient ratios computed from them are off. Raw
logprobs do not move with temperature: the same one-token prompt, sampled once at
temperature 1 and once at 2 (seeded), shows the same gap between its top two logprobs when
they are raw, and half the gap when they are processed (divided by T). One line per
finding; exit status 1 when the URL does not answer as an engine, or a probe call fails.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import orjson

from forge_record.engine_probe import Found, NotAnEngine, probe

PROMPT = "doctor"
SEED = 7
TIMEOUT = 120.0  # a first call to a CPU engine compiles and warms up
SAME = 0.05  # relative difference below which two gaps are one


def check_engine(url: str, report: Any) -> None:
    """The engine checks, as `report` lines (commands.doctor.Report)."""
    print_ = report.check
    try:
        found = probe(url)
    except NotAnEngine as e:
        print_(False, "engine", f"{url} does not answer as vLLM or SGLang: {e}")
        return
    print_(True, "engine", f"{found.name} {found.version or '(version unknown)'} at {found.url}")
    print_(True if found.models else None, "models", ", ".join(found.models) or "none listed")
    if not found.models and found.name == "vllm":
        return
    try:
        gaps = [top2_gap(found, temperature) for temperature in (1.0, 2.0)]
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        print_(False, "logprob mode", f"the probe call failed: {_reason(e)}")
        return
    mode, why = logprob_mode(*gaps)
    if mode == "raw":
        report.warn("logprob mode", f"raw: {why}; policy-gradient ratios need the "
                    "probabilities the tokens were sampled with: start vLLM with "
                    "--logprobs-mode processed_logprobs")
    elif mode == "processed":
        print_(True, "logprob mode", f"processed: {why}")
    else:
        report.warn("logprob mode", f"cannot tell: {why}")


def logprob_mode(gap_t1: float, gap_t2: float) -> tuple[str, str]:
    """("raw" | "processed" | "unknown", why) from the top-2 gaps at T=1 and T=2."""
    seen = f"the top-2 logprob gap is {gap_t1:.4f} at temperature 1 and {gap_t2:.4f} at 2"
    if gap_t1 <= 1e-6:
        return "unknown", f"{seen} (the two top tokens are tied)"
    if abs(gap_t1 - gap_t2) <= SAME * gap_t1:
        return "raw", f"{seen}: temperature does not reach them"
    if abs(gap_t1 / 2 - gap_t2) <= SAME * gap_t1:
        return "processed", f"{seen}: divided by the temperature, as sampled"
    return "unknown", f"{seen}: neither equal nor halved"


def top2_gap(found: Found, temperature: float) -> float:
    """The gap between the two most likely first tokens of PROMPT at `temperature`."""
    if found.name == "sglang":
        answer = _post(f"{found.url}/generate", {
            "text": PROMPT, "return_logprob": True, "top_logprobs_num": 2,
            "sampling_params": {"temperature": temperature, "max_new_tokens": 1,
                                "sampling_seed": SEED}})
        values = [t[0] for t in answer["meta_info"]["output_top_logprobs"][0]]
    else:
        answer = _post(f"{found.url}/v1/completions", {
            "model": found.models[0], "prompt": PROMPT, "max_tokens": 1, "logprobs": 2,
            "temperature": temperature, "seed": SEED})
        values = list(answer["choices"][0]["logprobs"]["top_logprobs"][0].values())
    first, second = sorted(values, reverse=True)[:2]
    return first - second


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, orjson.dumps(body),
                                     {"content-type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=TIMEOUT) as response:
        return orjson.loads(response.read())


def _reason(e: Exception) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"{e.code} {e.reason}: {e.read()[:200].decode(errors='replace')}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return f"{type(e).__name__}: {e}"
