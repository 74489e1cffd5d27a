"""Judge clients: the contract, the lean HTTP client and its runner, the openai client."""

from __future__ import annotations

from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.gate import CallGate, PacedJudge, Pacing
from workers.judge.http_judge import AsyncHttpJudge
from workers.judge.openai_judge import OpenAIJudge
from workers.judge.runner import JudgeRunner

__all__ = ["AsyncHttpJudge", "CallGate", "JudgeClient", "JudgeReply", "JudgeRequest",
           "JudgeRunner", "OpenAIJudge", "PacedJudge", "Pacing"]
