"""Judge clients: the contract and its OpenAI-compatible implementation."""

from __future__ import annotations

from workers.judge.base import JudgeClient, JudgeReply, JudgeRequest
from workers.judge.openai_judge import OpenAIJudge

__all__ = ["JudgeClient", "JudgeReply", "JudgeRequest", "OpenAIJudge"]
