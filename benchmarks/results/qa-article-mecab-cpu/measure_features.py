"""Time and peak memory of `build_features` on article-level KorQuAD with a MeCab tokenizer (README.md here).

python measure_features.py TOKENIZER ARTICLES.json QUESTIONS WINDOW   (run with PYTHONPATH=SRC for another tree)
"""

import resource
import sys
import time

import kolong  # noqa: F401  (registers the tokenizer classes)
from kolong.checkpoints import load_tokenizer
from kolong.data.qa_features import build_features
from kolong.data.squad import read_squad

tokenizer_dir, articles, questions, window = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tokenizer = load_tokenizer(tokenizer_dir)
examples = read_squad(articles).examples[:questions]
started = time.perf_counter()
features = build_features(tokenizer, examples, window, "sliding-window", 256, padding=False)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
print(
    f"{questions} questions -> {len(features)} windows of up to {window} tokens: {seconds:.1f} s, peak RSS {peak:.2f} GB"
)
