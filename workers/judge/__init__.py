"""The judge: one provider contract, its providers, and the fleet that wraps them."""

from __future__ import annotations

from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.fleet import FLEET_ORDER, JudgeFleet, layers_for
from workers.judge.gate import Pacing
from workers.judge.http_judge import AsyncHttpJudge
from workers.judge.openai_judge import OpenAIJudge
from workers.judge.provider import JudgeProvider, ProviderCapabilities

__all__ = ["FLEET_ORDER", "AsyncHttpJudge", "JudgeClient", "JudgeFleet", "JudgeProvider",
           "JudgeReply", "JudgeRequest", "OpenAIJudge", "Pacing", "ProviderCapabilities",
           "layers_for"]
