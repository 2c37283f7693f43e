"""Zero-shot accuracy on a tiny model: results, progress, events, the scorer's numbers, HFLM parity."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from toolkit.errors import ToolkitError
from toolkit.evaluation.zeroshot import ZeroShotResult, evaluate_tasks
from toolkit.events import EvalProgress, TaskScore, event_from_dict
from toolkit.models.load import load_model


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # "auto" then means the local validation copies


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


class _Request:
    """What lm-eval hands an LM: an object with ``args``."""

    def __init__(self, *args: object) -> None:
        self.args = args


def test_tiny_llama_two_tasks(tiny) -> None:
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    calls: list[tuple[str, int, int]] = []
    result = evaluate_tasks(tiny.model, tiny.codec, "boolq,winogrande", limit=2, device="cpu",
                            progress=lambda task, done, total: calls.append((task, done, total)))
    assert isinstance(result, ZeroShotResult)
    assert [t.task for t in result.tasks] == ["boolq", "winogrande"]
    for t in result.tasks:
        assert (t.split, t.source, t.shots, t.examples, t.metric) == ("validation", "local", 0, 2, "acc")
        assert 0.0 <= t.value <= 1.0 and t.seconds > 0
    assert result.mean == pytest.approx(sum(t.value for t in result.tasks) / 2)
    assert calls[0] == ("boolq", 0, 4) and ("boolq", 4, 4) in calls and calls[-1] == ("winogrande", 4, 4)
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data["tasks"]) == {"boolq", "winogrande"} and data["shots"] == 0 and data["limit"] == 2
    assert data["mean_of"] == {"boolq": "acc", "winogrande": "acc"}
    assert all(torch.equal(v, before[k]) for k, v in tiny.model.state_dict().items())
    assert not tiny.model.training


def test_events_round_trip(tiny) -> None:
    result = evaluate_tasks(tiny.model, tiny.codec, ["arc_easy"], limit=2)
    (score,) = [s for s in result.scores("pruned") if s.metric == "acc_norm"]
    assert isinstance(score, TaskScore) and (score.which, score.task, score.examples, score.split) == \
        ("pruned", "arc_easy", 2, "validation")
    assert result.tasks[0].note.startswith("offline: scored on validation")
    for event in (score, EvalProgress(phase="dense", what="arc_easy", done=3, total=8)):
        assert event_from_dict(json.loads(json.dumps(event.to_dict()))) == event


def test_limit_and_names_are_checked_before_scoring(tiny) -> None:
    with pytest.raises(ToolkitError, match="--limit must be ≥ 1"):
        evaluate_tasks(tiny.model, tiny.codec, ["rte"], limit=0)
    with pytest.raises(ToolkitError, match="Did you mean: winogrande"):
        evaluate_tasks(tiny.model, tiny.codec, ["winogrand"], limit=1)


def _by_hand(model: torch.nn.Module, context: list[int], continuation: list[int]) -> float:
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = F.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    return float(sum(logprobs[len(context) - 1 + i, tok] for i, tok in enumerate(continuation)))


def test_scores_are_sums_of_token_logprobs_and_padding_changes_nothing(tiny) -> None:
    from toolkit.evaluation.harness import CodecLM

    pairs = [("The sky is", " blue"), ("Question: 2+2?\nAnswer:", " four"), ("A", " much longer continuation here"),
             ("The sky is", " b"), ("The sky is", " r")]  # the last two share one model input
    batched = CodecLM(tiny.model, tiny.codec, batch_size=8).loglikelihood([_Request(*p) for p in pairs])
    single = CodecLM(tiny.model, tiny.codec, batch_size=1).loglikelihood([_Request(*p) for p in pairs])
    for (context, continuation), (score, _), (alone, _) in zip(pairs, batched, single, strict=True):
        expected = _by_hand(tiny.model, list(context.encode()), list(continuation.encode()))
        assert score == pytest.approx(expected, abs=1e-4) and alone == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("family", ["opt", "gpt2", "qwen2"])
def test_shared_context_scores_on_other_families(family: str) -> None:
    from toolkit.evaluation.harness import CodecLM

    loaded = load_model(f"tiny-{family}")
    pairs = [("Q: colour?\nA:", " blue"), ("Q: colour?\nA:", " red"), ("Q: colour?\nA:", " a long green")]
    scores = CodecLM(loaded.model, loaded.codec).loglikelihood([_Request(*p) for p in pairs])
    for (context, continuation), (score, _) in zip(pairs, scores, strict=True):
        expected = _by_hand(loaded.model, list(context.encode()), list(continuation.encode()))
        assert score == pytest.approx(expected, abs=1e-4)


def test_rolling_and_generate_until(tiny) -> None:
    from toolkit.evaluation.harness import CodecLM

    lm = CodecLM(tiny.model, tiny.codec)
    text = "hello world"
    (rolling,) = lm.loglikelihood_rolling([_Request(text)])
    assert rolling == pytest.approx(_by_hand(tiny.model, [tiny.codec.bos_id], list(text.encode())), abs=1e-4)
    (free,) = lm.generate_until([_Request("abc", {"until": [], "max_gen_toks": 12})])
    stop = free[3] if len(free) > 3 else free[-1]
    (cut,) = lm.generate_until([_Request("abc", {"until": [stop], "max_gen_toks": 12})])
    assert free.startswith(cut) and stop not in cut


@pytest.mark.slow
def test_scores_match_hflm_on_the_embedded_model() -> None:
    """Our scorer against lm-eval's HFLM on the same in-memory SmolLM2 and the same requests."""
    from lm_eval.models.huggingface import HFLM

    from toolkit.evaluation.harness import CodecLM
    from toolkit.evaluation.tasks import resolve_tasks
    from toolkit.evaluation.zeroshot import build_task

    loaded = load_model("smollm2-135m")
    hflm = HFLM(pretrained=loaded.model, tokenizer=loaded.codec.tokenizer, batch_size=4, device="cpu")
    ours = CodecLM(loaded.model, loaded.codec, batch_size=4)
    for spec in resolve_tasks("boolq,hellaswag,winogrande,arc_challenge", "local"):
        task = build_task(spec)
        task.build_all_requests(limit=3, rank=0, world_size=1)
        theirs, mine = hflm.loglikelihood(task.instances), ours.loglikelihood(task.instances)
        assert [g for _, g in theirs] == [g for _, g in mine]
        assert max(abs(a - b) for (a, _), (b, _) in zip(theirs, mine, strict=True)) < 1e-3
    assert math.isfinite(ours.loglikelihood_rolling([_Request("The quick brown fox.")])[0])


class _NoSpecialTokens:
    """A tokenizer without BOS or EOS (as some converted or hand-made tokenizers are)."""

    name, bos_id, fingerprint = "no-specials", None, "no-specials"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def test_a_bos_family_without_bos_is_refused_before_scoring(monkeypatch: pytest.MonkeyPatch) -> None:
    import toolkit.evaluation.zeroshot as zeroshot

    gemma = load_model("tiny-gemma3")
    monkeypatch.setattr(zeroshot, "_run_task", lambda *args: pytest.fail("scored without a BOS token"))
    with pytest.raises(ToolkitError, match=r"gemma3_text models need a BOS token .* 'no-specials' has none, so rte"):
        evaluate_tasks(gemma.model, _NoSpecialTokens(), ["rte"], limit=1)


def test_an_empty_context_without_bos_or_eos_is_an_error_not_a_guessed_id(tiny) -> None:
    from toolkit.evaluation.harness import CodecLM

    lm = CodecLM(tiny.model, _NoSpecialTokens())  # a Llama: no BOS needed for inputs with a context
    (score, _), = lm.loglikelihood([_Request("The sky is", " blue")])
    assert math.isfinite(score)
    with pytest.raises(ToolkitError, match="neither an EOS nor a BOS token"):
        lm.loglikelihood([_Request("", " blue")])
