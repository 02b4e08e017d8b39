"""A small built-in Korean text (written for kolong, Apache-2.0) so demos and tests run offline."""

KOREAN_PARAGRAPHS = (
    "한국어 문서는 생각보다 길다. 행정 문서와 판결문, 신문 기사와 백과사전 항목은 수천 개의 토큰으로 "
    "이루어지는 경우가 많지만, 널리 쓰이는 사전학습 인코더는 대부분 512개의 위치만 알고 있다.",
    "위치 임베딩 표를 늘리는 가장 단순한 방법은 기존 행 사이의 중간값을 새 행으로 넣는 것이다. 이렇게 하면 "
    "새 표의 짝수 번째 행은 원래 표와 같고, 홀수 번째 행은 이웃한 두 행의 평균이 된다.",
    "긴 문서에서 질문에 답하려면 문서 전체를 한 번에 읽거나, 문서를 겹치는 창으로 나누어 읽은 뒤 "
    "각 창에서 찾은 후보 답을 모아 가장 점수가 높은 것을 골라야 한다.",
    "형태소 분석기는 어절을 더 작은 의미 단위로 나눈다. 예를 들어 '위한'은 '위하'와 'ㄴ'으로 나뉘는데, "
    "이때에도 원문에서의 글자 위치는 정확히 유지되어야 정답 구간을 찾을 수 있다.",
    "바이트 단위 모델은 어휘 사전이 필요 없다. 오타나 이모지, 여러 문자가 섞인 문장도 그대로 읽지만, "
    "한글 한 글자가 세 바이트이므로 입력 길이가 세 배 가까이 늘어난다.",
    "상대 위치 표현은 두 토큰 사이의 거리만을 본다. 거리가 일정 범위를 넘으면 같은 벡터를 쓰기 때문에 "
    "학습 때보다 긴 입력에서도 비교적 안정적으로 동작한다.",
    "서울특별시는 1988년 하계 올림픽을 개최하였고, 2002년에는 일본과 함께 월드컵을 공동 개최하였다. "
    "한강을 따라 수많은 다리가 놓여 있으며, 지하철은 하루 수백만 명의 시민을 실어 나른다.",
    "조선 시대의 기록은 방대하다. 왕의 하루하루를 적은 실록은 수백 권에 이르며, 오늘날 연구자들은 이를 "
    "디지털화하여 누구나 검색할 수 있도록 공개하고 있다.",
)


def korean_document(min_characters: int) -> str:
    """The built-in paragraphs, repeated in order until the text has at least `min_characters` characters."""
    parts: list[str] = []
    total = 0
    while total < min_characters:
        paragraph = KOREAN_PARAGRAPHS[len(parts) % len(KOREAN_PARAGRAPHS)]
        parts.append(paragraph)
        total += len(paragraph) + 1
    return "\n".join(parts)


# (article title, [(paragraph index in KOREAN_PARAGRAPHS, [(question, answer), ...]), ...])
_QA_ARTICLES = (
    (
        "긴 문서",
        [
            (
                0,
                [
                    ("널리 쓰이는 사전학습 인코더는 몇 개의 위치를 아는가?", "512개"),
                    ("수천 개의 토큰으로 이루어지는 문서의 예는?", "판결문"),
                ],
            ),
            (
                1,
                [
                    ("새 표의 홀수 번째 행은 무엇이 되는가?", "이웃한 두 행의 평균"),
                    ("짝수 번째 행은 어느 표와 같은가?", "원래 표"),
                ],
            ),
            (2, [("문서를 나누어 읽을 때 쓰는 창은 어떤 창인가?", "겹치는 창")]),
        ],
    ),
    (
        "한국어 처리",
        [
            (
                3,
                [
                    ("형태소 분석기는 어절을 무엇으로 나누는가?", "더 작은 의미 단위"),
                    ("'위한'은 '위하'와 무엇으로 나뉘는가?", "'ㄴ'"),
                ],
            ),
            (
                4,
                [
                    ("한글 한 글자는 몇 바이트인가?", "세 바이트"),
                    ("바이트 단위 모델에 필요 없는 것은?", "어휘 사전"),
                ],
            ),
            (5, [("거리가 일정 범위를 넘으면 무엇을 쓰는가?", "같은 벡터")]),
        ],
    ),
    (
        "서울과 조선",
        [
            (
                6,
                [
                    ("서울특별시가 하계 올림픽을 개최한 해는?", "1988년"),
                    ("2002년 월드컵을 함께 개최한 나라는?", "일본"),
                ],
            ),
            (7, [("왕의 하루하루를 적은 기록은?", "실록"), ("실록은 몇 권에 이르는가?", "수백 권")]),
        ],
    ),
)


def korean_qa_dataset() -> dict:
    """A small KorQuAD-format dataset over the built-in paragraphs (3 articles, 14 questions)."""
    data = []
    for a, (title, paragraphs) in enumerate(_QA_ARTICLES):
        entries = []
        for index, questions in paragraphs:
            context = KOREAN_PARAGRAPHS[index]
            qas = []
            for q, (question, answer) in enumerate(questions):
                start = context.find(answer)
                assert start >= 0 and context.count(answer) == 1, answer
                qas.append(
                    {
                        "id": f"kolong-{a}-{index}-{q}",
                        "question": question,
                        "answers": [{"text": answer, "answer_start": start}],
                    }
                )
            entries.append({"context": context, "qas": qas})
        data.append({"title": title, "paragraphs": entries})
    return {"version": "kolong-sample", "data": data}
