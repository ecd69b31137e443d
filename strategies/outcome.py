"""Why a round gave no usable reply, and the message that stops a run in which nothing learns.

A client's reply is lost in one of three ways: it was rejected (malformed, out of range), it
failed (an error reply: the ClientApp raised, the node went away) or it never came back within
``round-timeout``. The stop rule (``max-rejected-rounds``) counts every round in which a phase
sent messages and none of the replies was usable, whatever the reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.config import TrainingParams

from .federation import REJECTED, TIMED_OUT, Exchange


def sent(exchange: Exchange | None) -> int:
    """How many messages ``exchange`` sent (every one ends as a reply or a failure)."""
    return 0 if exchange is None else len(exchange.replies) + len(exchange.failures)


def loss_causes(exchange: Exchange) -> dict[str, list[int]]:
    """The clients of ``exchange`` whose reply was lost, by cause: rejected, failed, timed out."""
    out: dict[str, list[int]] = {"rejected": [], "failed": [], "timed out": []}
    for pid, cause in sorted(exchange.failures.items()):
        if cause.startswith(REJECTED):
            out["rejected"].append(pid)
        elif cause.startswith(TIMED_OUT):
            out["timed out"].append(pid)
        else:
            out["failed"].append(pid)
    return out


def some_ids(ids: list[int], shown: int = 5) -> str:
    """``[3, 7, 9]`` or ``[3, 7, 9, 11, 12] and 40 more``: a few ids, then a count."""
    ids = sorted(ids)
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return f"{ids[:shown]}{more}"


def loss_counts(exchange: Exchange | None) -> str:
    """``2 failed [1, 4], 1 timed out [3]``: the clients whose reply was lost, by cause; ``""`` if none."""
    causes = loss_causes(exchange) if exchange is not None else {}
    return ", ".join(f"{len(ids)} {cause} {some_ids(ids)}" for cause, ids in causes.items() if ids)


def identity_failures(exchange: Exchange) -> str:
    """``4 nodes asked: 4 failed [...]``: how the identity query of ``exchange`` (keyed by node id) went."""
    counts = loss_counts(exchange)
    replied = len(exchange.replies)
    refused = f", {replied} replied but were refused (see above)" if replied else ""
    return f"{sent(exchange)} nodes asked: {counts or 'none failed'}{refused}"


def stop_reason(phase: str, server_round: int, streak: int, limit: int, exchange: Exchange | None) -> str:
    """The message of the ``RuntimeError`` that stops a run whose ``phase`` gave nothing usable.

    Parameters
    ----------
    phase : str
        ``"train"`` or ``"evaluate"``.
    server_round : int
        The round that ends the streak.
    streak : int
        Consecutive rounds without a usable reply of ``phase``.
    limit : int
        ``max-rejected-rounds``.
    exchange : Exchange or None
        The round's exchange of ``phase``, for the causes and the first fault.
    """
    counts = loss_counts(exchange)
    first = ""
    if exchange is not None and exchange.failures:
        pid, cause = min(exchange.failures.items(), key=lambda item: (not item[1].startswith(REJECTED), item[0]))
        last_line = (cause.removeprefix(REJECTED).strip().splitlines() or [""])[-1][-300:]  # Ray: a whole traceback
        first = f" First fault this round: client {pid}: {last_line}."
    rounds = f"round {server_round}" if streak == 1 else f"{streak} consecutive rounds"
    return (
        f"Stopping after round {server_round}: no {phase} reply was usable in {rounds} "
        f"(max-rejected-rounds {limit}), so nothing learns. This round's {sent(exchange)} {phase} "
        f"messages: {counts or 'no reply'}.{first} docs/protocol.md lists what a client must answer."
    )


def stop_if_all_rejected(
    usable: Mapping[str, int],
    asked: Mapping[str, Exchange],
    rejected_rounds: dict[str, int],
    accepted_phases: set[str],
    server_round: int,
    training: TrainingParams,
) -> None:
    """Raise once no reply of a phase was usable in ``max-rejected-rounds`` rounds in a row.

    Per phase (``usable``: the usable replies of each phase this round sent, train and
    evaluate), over the rounds that sent that phase's messages (``asked``): a round counts
    whether its replies were rejected, failed or timed out, and the last round stops a run that
    never accepted a reply of that phase. ``rejected_rounds`` (the streaks) and
    ``accepted_phases`` are updated in place; ``max-rejected-rounds`` 0 never stops.

    Raises
    ------
    RuntimeError
        With ``stop_reason``'s message.
    """
    limit = training.max_rejected_rounds
    for phase, accepted in usable.items():
        if accepted:
            rejected_rounds[phase] = 0
            accepted_phases.add(phase)
        elif sent(asked.get(phase)):
            streak = rejected_rounds[phase] = rejected_rounds.get(phase, 0) + 1
            never = phase not in accepted_phases and server_round == training.rounds
            if limit and (streak >= limit or never):
                raise RuntimeError(stop_reason(phase, server_round, streak, limit, asked.get(phase)))
