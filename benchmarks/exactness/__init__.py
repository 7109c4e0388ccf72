"""How far the scores are from exact: float32 against float64 and the naive one-at-a-time computation,
and batched greedy generation against each prompt decoded alone."""
