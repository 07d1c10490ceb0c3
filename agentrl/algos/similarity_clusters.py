"""GiGPO's step groups by text similarity (``algo.gigpo.similarity``): the reference's greedy clustering.

Where anchors are observation texts that differ in small ways, verl-agent groups them by
``difflib.SequenceMatcher`` ratio instead of equality. ``agentrl/algos/step_groups.py`` calls
``similarity_clusters`` in place of grouping equal keys; docs/algorithms.md, "GiGPO", states the rule.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np


def similarity_clusters(
    group_code: np.ndarray, keys: list, threshold: float, row_order: np.ndarray
) -> tuple[np.ndarray, int]:
    """Dense cluster code per row and the number of clusters: the reference's similarity clustering, per group.

    verl-agent's ``build_step_group(enable_similarity=True)``: within each group (``group_code``), rows are
    visited in ``row_order`` and each joins the first cluster whose first member's text is similar enough
    (``_cluster_texts``). ``keys`` are the rows' anchor texts; ``threshold`` is in (0, 1), checked by the caller.
    """
    if not all(isinstance(key, str) for key in keys):
        raise ValueError("similarity grouping needs string anchors (observation texts)")
    visit = row_order[np.argsort(group_code[row_order], kind="stable")]  # groups in turn, row_order within
    group_starts = np.flatnonzero(np.diff(group_code[visit])) + 1
    codes = np.empty(len(keys), dtype=np.intp)
    num_clusters = 0
    for rows in np.split(visit, group_starts):
        local = _cluster_texts([keys[i] for i in rows.tolist()], threshold)
        codes[rows] = num_clusters + local
        num_clusters += int(local.max()) + 1
    return codes, num_clusters


def _cluster_texts(texts: list[str], threshold: float) -> np.ndarray:
    """Cluster index of each text: the first cluster whose first member is similar enough, else a new one.

    A text's cluster depends on the text alone (the clusters it is compared
    with all exist when it is first seen, and later clusters come after the one
    it matched), so equal texts are matched once.
    """
    cluster_of_text: dict[str, int] = {}
    representatives: list[SequenceMatcher] = []
    local = []
    for text in texts:
        cluster = cluster_of_text.get(text)
        if cluster is None:
            cluster = _first_similar(text, representatives, threshold)
            if cluster is None:
                cluster = len(representatives)
                # The representative is seq2, as in the reference's SequenceMatcher(None, text, rep):
                # difflib caches its analysis of seq2 across set_seq1 calls.
                representatives.append(SequenceMatcher(None, "", text))
            cluster_of_text[text] = cluster
        local.append(cluster)
    return np.array(local, dtype=np.intp)


def _first_similar(text: str, representatives: list[SequenceMatcher], threshold: float) -> int | None:
    for cluster, matcher in enumerate(representatives):
        matcher.set_seq1(text)
        # real_quick_ratio and quick_ratio bound ratio from above: cheap rejections, same answer.
        if (
            matcher.real_quick_ratio() >= threshold
            and matcher.quick_ratio() >= threshold
            and matcher.ratio() >= threshold
        ):
            return cluster
    return None
