"""judge-sim: an OpenAI-compatible judge for tests and load tests.

It answers the built-in judge prompts in their own formats with scores derived
from the prompt (see :func:`simulated_scores`), injects faults at configured
rates (429, 500, hangs, malformed and truncated verdicts), follows reply
scripts, and counts what it saw. Start one in a test with
:func:`start_in_thread`, or serve one with :func:`serve`.
"""

from evalfleet.judgesim.config import (
    MALFORMED_KINDS,
    InvalidSimConfig,
    LatencyKind,
    MalformedKind,
    SimConfig,
)
from evalfleet.judgesim.directive import parse_directives
from evalfleet.judgesim.faults import (
    OUTCOMES,
    Fault,
    InvalidScript,
    Outcome,
    Script,
    ScriptedReply,
    ScriptRule,
    SlidingWindow,
    decide_fault,
    first_answer_fault,
    lognormal_sigma,
    retry_after_header,
    sample_latency_ms,
)
from evalfleet.judgesim.quality import JudgeProfile
from evalfleet.judgesim.replies import (
    InvalidChatRequest,
    Prompt,
    PromptFormat,
    Reply,
    Usage,
    build_reply,
    estimate_tokens,
    prompt_key,
    recognise_prompt,
    reference_missing,
    reply_with,
    simulated_scores,
    simulated_verdict,
)
from evalfleet.judgesim.runner import RunningSim, run_judge_sim, serve, start_in_thread
from evalfleet.judgesim.server import SimNotStarted, SimState, create_app

__all__ = [
    "MALFORMED_KINDS",
    "OUTCOMES",
    "Fault",
    "InvalidChatRequest",
    "InvalidScript",
    "InvalidSimConfig",
    "JudgeProfile",
    "LatencyKind",
    "MalformedKind",
    "Outcome",
    "Prompt",
    "PromptFormat",
    "Reply",
    "RunningSim",
    "Script",
    "ScriptRule",
    "ScriptedReply",
    "SimConfig",
    "SimNotStarted",
    "SimState",
    "SlidingWindow",
    "Usage",
    "build_reply",
    "create_app",
    "decide_fault",
    "estimate_tokens",
    "first_answer_fault",
    "lognormal_sigma",
    "parse_directives",
    "prompt_key",
    "recognise_prompt",
    "reference_missing",
    "reply_with",
    "retry_after_header",
    "run_judge_sim",
    "sample_latency_ms",
    "serve",
    "simulated_scores",
    "simulated_verdict",
    "start_in_thread",
]
