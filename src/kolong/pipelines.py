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
    # {'answer': '...', 'start': 10342, 'end': 10371, 'score': 14.2}
"""

from __future__ import annotations

import torch
from transformers import Pipeline

from kolong.data.qa_features import WindowCollator, build_features, stack_logits, window_batches
from kolong.data.squad import QAExample
from kolong.errors import DataError
from kolong.evaluation.qa_postprocess import decode_answers
from kolong.positions.reach import model_max_length

TASK = "long-document-qa"


class LongDocumentQAPipeline(Pipeline):
    """Answers {question, context} pairs; returns {answer, start, end, score} per pair (score: the span's
    start + end logits, comparable within one model)."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False

    def __call__(self, inputs=None, question: str | None = None, context: str | None = None, **kwargs):
        if question is not None or context is not None:
            inputs = {"question": question, "context": context}
        many = isinstance(inputs, (list, tuple))
        pairs = list(inputs) if many else [inputs]
        # All pairs of a call are one pipeline input, so their windows share batches.
        results = super().__call__(_Pairs(pairs), **kwargs)
        return results if many else results[0]

    def _sanitize_parameters(self, max_length=None, doc_stride=None, n_best=None, max_answer_length=None):
        preprocess = {
            k: v for k, v in (("max_length", max_length), ("doc_stride", doc_stride)) if v is not None
        }
        postprocess = {
            k: v for k, v in (("n_best", n_best), ("max_answer_length", max_answer_length)) if v is not None
        }
        return preprocess, {}, postprocess

    def preprocess(self, pairs: _Pairs, max_length: int | None = None, doc_stride: int = 128):
        examples = []
        for index, pair in enumerate(pairs):
            if not isinstance(pair, dict) or not all(
                isinstance(pair.get(k), str) for k in ("question", "context")
            ):
                raise DataError(f"long-document-qa input {index}: needs text fields question and context")
            examples.append(
                QAExample(id=str(index), question=pair["question"], context=pair["context"], answers=[])
            )
        length = max_length or min(model_max_length(self.model), self.tokenizer.model_max_length)
        features = build_features(
            self.tokenizer, examples, length, "sliding-window", doc_stride, padding=False
        )
        return {"examples": examples, "features": features, "max_length": length}

    def _forward(self, model_inputs):
        from kolong.attention.flex import compiles_per_length

        collate = WindowCollator(
            self.tokenizer, model_inputs["max_length"], compiles_per_length(self.model, self.device)
        )
        starts, ends = [], []
        for batch in window_batches(model_inputs["features"], self._batch_size or 16, collate):
            output = self.model(**{name: tensor.to(self.device) for name, tensor in batch.items()})
            starts.append(output.start_logits.float().cpu().numpy())
            ends.append(output.end_logits.float().cpu().numpy())
        return {**model_inputs, "start_logits": stack_logits(starts), "end_logits": stack_logits(ends)}

    def postprocess(self, model_outputs, n_best: int = 20, max_answer_length: int = 30):
        examples = model_outputs["examples"]
        _, nbest = decode_answers(
            examples, model_outputs["features"], model_outputs["start_logits"], model_outputs["end_logits"],
            n_best=n_best, max_answer_length=max_answer_length,
        )  # fmt: skip
        answers = []
        for example in examples:
            best = (
                nbest[example.id][0]
                if nbest[example.id]
                else {"text": "", "start": 0, "end": 0, "score": 0.0}
            )
            answers.append(
                {"answer": best["text"], "start": best["start"], "end": best["end"], "score": best["score"]}
            )
        return answers

    def forward(self, model_inputs, **forward_params):
        # Pipeline.forward moves tensors to the device; our inputs are python lists, placed batch by batch.
        with torch.inference_mode():
            return self._forward(model_inputs, **forward_params)


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
