"""`pipeline("long-document-qa", model=...)`: extractive QA over a document of any length, in one call.

Registered with HF's pipeline registry by `import kolong` (transformers 5 removed its own question-answering
pipeline). The document is cut into the model's windows (sliding, `doc_stride` tokens of overlap) exactly
as `kolong predict qa` cuts it, the windows of all documents of a call go through the model in batches of
`batch_size`, and the best span over all windows wins. An extended model (`kolong extend`) reads windows
as long as its positions, so most documents fit in one.

    import kolong
    from transformers import pipeline

    reader = pipeline("long-document-qa", model="extended-qa-model")
    reader(question="헌법 개정은 누가 제안하나?", context=long_text)
    # {'answer': '...', 'start': 10342, 'end': 10371, 'score': 0.71, 'logit_score': 14.2}
    reader(question=..., context=..., top_k=3, max_answer_len=50, handle_impossible_answer=True)
"""

from __future__ import annotations

import torch
from transformers import Pipeline

from kolong.data.qa_features import (
    PIPELINE_NAMES,
    WindowCollator,
    build_features,
    compiles_per_length,
    prediction_windows,
    stack_logits,
    window_batches,
)
from kolong.data.squad import QAExample
from kolong.errors import CheckpointError, ConfigError, DataError
from kolong.evaluation.qa_postprocess import decode_answers, null_answers
from kolong.extension.block_sparse import run_block_sparse

TASK = "long-document-qa"


class LongDocumentQAPipeline(Pipeline):
    """Answers {question, context} pairs with HF's question-answering keys, {answer, start, end, score}, and
    `logit_score`; a list of `top_k` such answers per pair when `top_k` > 1.

    Arguments, under HF's names (kolong's `max_length`, `max_answer_length` and `n_best` are taken too):
    `top_k` (1), `max_answer_len` (30), `max_seq_len` (the windows the model was fine-tuned on, recorded by
    `kolong finetune qa`, else its positions), `doc_stride` (the fine-tuning's, else a third of the window,
    at most 128), `handle_impossible_answer` (False: the empty answer when [CLS] beats every span).

    Answers are ranked as `kolong predict qa` ranks them, by the start + end logits pooled over all windows
    (`logit_score`), which compare across windows; `score` is HF's, the start probability times the end
    probability within the span's window (softmax over its context tokens and [CLS]). The empty answer's
    score is the smallest [CLS] probability over the windows, as in HF."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _refuse_an_untrained_head(self.model)
        run_block_sparse(self.model)  # BigBird: block-sparse after a short document, in linear memory

    def __call__(self, inputs=None, question: str | None = None, context: str | None = None, **kwargs):
        if question is not None or context is not None:
            inputs = {"question": question, "context": context}
        many = isinstance(inputs, (list, tuple))
        pairs = list(inputs) if many else [inputs]
        # All pairs of a call are one pipeline input, so their windows share batches.
        results = super().__call__(_Pairs(pairs), **kwargs)
        return results if many else results[0]

    def _sanitize_parameters(
        self,
        top_k=None,
        max_answer_len=None,
        max_seq_len=None,
        doc_stride=None,
        handle_impossible_answer=None,
        max_length=None,
        max_answer_length=None,
        n_best=None,
    ):
        preprocess = {"max_seq_len": max_seq_len or max_length, "doc_stride": doc_stride}
        postprocess = {
            "top_k": top_k,
            "max_answer_len": max_answer_len or max_answer_length,
            "handle_impossible_answer": handle_impossible_answer,
            "n_best": n_best,
        }
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise ConfigError(f"long-document-qa: top_k must be a whole number of at least 1, got {top_k!r}")
        drop = lambda params: {k: v for k, v in params.items() if v is not None}  # noqa: E731
        return drop(preprocess), {}, drop(postprocess)

    def preprocess(self, pairs: _Pairs, max_seq_len: int | None = None, doc_stride: int | None = None):
        examples = []
        for index, pair in enumerate(pairs):
            if not isinstance(pair, dict) or not all(
                isinstance(pair.get(k), str) for k in ("question", "context")
            ):
                raise DataError(f"long-document-qa input {index}: needs text fields question and context")
            examples.append(
                QAExample(id=str(index), question=pair["question"], context=pair["context"], answers=[])
            )
        # the fine-tuning's windows unless asked otherwise
        length, stride = prediction_windows(
            self.model,
            self.tokenizer,
            max_seq_len,
            doc_stride,
            self.model.config.name_or_path or "the model",
            PIPELINE_NAMES,
        )
        features = build_features(
            self.tokenizer, examples, length, "sliding-window", stride, padding=False, names=PIPELINE_NAMES
        )
        return {"examples": examples, "features": features, "max_length": length}

    def _forward(self, model_inputs):
        collate = WindowCollator(
            self.tokenizer, model_inputs["max_length"], compiles_per_length(self.model, self.device)
        )
        starts, ends = [], []
        for batch in window_batches(model_inputs["features"], self._batch_size or 16, collate):
            output = self.model(**{name: tensor.to(self.device) for name, tensor in batch.items()})
            starts.append(output.start_logits.float().cpu().numpy())
            ends.append(output.end_logits.float().cpu().numpy())
        return {**model_inputs, "start_logits": stack_logits(starts), "end_logits": stack_logits(ends)}

    def postprocess(
        self,
        model_outputs,
        top_k: int = 1,
        max_answer_len: int = 30,
        handle_impossible_answer: bool = False,
        n_best: int = 20,
    ):
        examples, features = model_outputs["examples"], model_outputs["features"]
        predictions, nbest = decode_answers(
            examples, features, model_outputs["start_logits"], model_outputs["end_logits"],
            n_best=max(n_best, top_k), max_answer_length=max_answer_len, allow_no_answer=handle_impossible_answer,
        )  # fmt: skip
        null = null_answers(features, model_outputs["start_logits"], model_outputs["end_logits"])
        results = []
        for index, example in enumerate(examples):
            empty = {
                "answer": "",
                "start": 0,
                "end": 0,
                **null.get(index, {"score": 0.0, "logit_score": 0.0}),
            }
            answers = [
                {"answer": c["text"], "start": c["start"], "end": c["end"], "score": c["probability"],
                 "logit_score": c["score"]}
                for c in nbest[example.id]
            ]  # fmt: skip
            if handle_impossible_answer:  # ranked among the spans by its logits, first where it wins
                position = 0 if predictions[example.id] == "" else len(answers)
                while position and answers[position - 1]["logit_score"] < empty["logit_score"]:
                    position -= 1
                answers.insert(position, empty)
            answers = answers[:top_k] or [empty]
            results.append(answers[0] if top_k == 1 else answers)
        return results

    def forward(self, model_inputs, **forward_params):
        # Pipeline.forward moves tensors to the device; our inputs are python lists, placed batch by batch.
        with torch.inference_mode():
            return self._forward(model_inputs, **forward_params)


def _refuse_an_untrained_head(model) -> None:
    """A checkpoint saved without a QA head (a bare encoder, a masked LM) loads with a random one: its answers
    would be noise. `kolong predict qa` refuses it; so does the pipeline. A model built in memory (no saved
    architectures) is taken as it is."""
    saved = getattr(model.config, "architectures", None) or []
    if saved and not any(name.endswith("ForQuestionAnswering") for name in saved):
        raise CheckpointError(
            f"{model.config.name_or_path or 'the model'} was saved as {', '.join(saved)}, without a trained "
            "question-answering head (it would start random); fine-tune it first with `kolong finetune qa`"
        )


class _Pairs:
    """The pairs of one call, as one pipeline input (Pipeline would split a list into many inputs)."""

    def __init__(self, pairs: list):
        self.pairs = pairs

    def __iter__(self):
        return iter(self.pairs)


def register_pipeline() -> None:
    from transformers import AutoModelForQuestionAnswering
    from transformers.pipelines import PIPELINE_REGISTRY

    if TASK not in PIPELINE_REGISTRY.supported_tasks:
        PIPELINE_REGISTRY.register_pipeline(
            TASK, pipeline_class=LongDocumentQAPipeline, pt_model=AutoModelForQuestionAnswering, type="text"
        )
