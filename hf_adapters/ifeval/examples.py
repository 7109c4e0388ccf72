"""Hand-written IFEval rows with responses, for the demo and the examples."""

from __future__ import annotations

from typing import Any


def demo_rows() -> list[dict[str, Any]]:
    """Four short hand-written IFEval rows with responses, two followed and two not."""
    return [
        {
            "key": "demo-1",
            "prompt": "Describe a sunrise in at most 3 sentences without using any commas.",
            "instruction_id_list": ["length_constraints:number_sentences", "punctuation:no_comma"],
            "kwargs": [{"num_sentences": 4, "relation": "less than"}, {}],
            "response": "The sky turns pink. The sun climbs slowly over the hills.",
        },
        {
            "key": "demo-2",
            "prompt": "Give a title wrapped in double angular brackets, then end with 'Any questions?'.",
            "instruction_id_list": ["detectable_format:title", "startend:end_checker"],
            "kwargs": [{}, {"end_phrase": "Any questions?"}],
            "response": "<<Tea at Noon>>\nBrew green tea for two minutes.\nAny questions?",
        },
        {
            "key": "demo-3",
            "prompt": "Answer in lowercase English letters only and include the word 'river'.",
            "instruction_id_list": ["change_case:english_lowercase", "keywords:existence"],
            "kwargs": [{}, {"keywords": ["river"]}],
            "response": "The River flows to the sea, carrying silt from the mountains.",
        },
        {
            "key": "demo-4",
            "prompt": "List exactly 2 bullet points using markdown, and wrap the answer in double quotes.",
            "instruction_id_list": ["detectable_format:number_bullet_lists", "startend:quotation"],
            "kwargs": [{"num_bullets": 2}, {}],
            "response": "* apples\n* pears\n* plums",
        },
    ]
