"""Dr. MAS's agent-wise advantages (arXiv 2602.08847): `algo.norm_scope` and `algo.episode_stats=episode_means`.

The oracle is the reference's code, transcribed into numpy below and run on seeded batches: langfengQ/DrMAS at
19c632b, `verl/trainer/ppo/ray_trainer.py:269-274` (the group key) and `verl/trainer/ppo/core_algos.py`:
`compute_grpo_outcome_advantage` (497-570, its statistics at 538-566), GiGPO's `episode_norm_reward` (237-303) and
`compute_rloo_outcome_advantage` (680-721). The transcription keeps the reference's loops and its one-member rule
(mu = 0, sigma = 1, then a division by 1 + eps), in float64 where the reference has float32 (the float32 noise is
a documented deviation of every estimator here, docs/algorithms.md). The three arms of langfengQ/DrMAS#81 are the
reference's function called three ways: (uid, flag off), (uid, flag on), (uid_agent, flag on).
"""

from collections import defaultdict

import numpy as np
import pytest

from agentrl.algos.gigpo import gigpo
from agentrl.algos.grpo import grpo, rloo
from agentrl.algos.step_groups import step_group_codes

EPS = 1e-6
C = 0.1  # the invalid penalty
TOL = dict(rtol=1e-5, atol=1e-5)

# --------------------------------------------------------------------------- the reference, transcribed


def ref_group_index(uid, agent_id, group_by_agent_id):
    """ray_trainer.py:269-274: the group key is f"{uid}_{agent_id}" with the flag on, else the uid."""
    if group_by_agent_id:
        return np.array([f"{u}_{a}" for u, a in zip(uid, agent_id)], dtype=object)
    return np.asarray(uid)


def ref_grpo(scores, index, traj_index, norm_adv_by_std_in_grpo, group_by_agent_id, epsilon=EPS):
    """core_algos.py:497-570, compute_grpo_outcome_advantage (the loops of 538-566), scores one per row."""
    scores = np.array(scores, dtype=np.float64)
    id2score, id2mean, id2std = defaultdict(list), {}, {}
    traj_accumulator, traj2avg = defaultdict(list), {}
    bsz = scores.shape[0]
    for i in range(bsz):
        traj_accumulator[(index[i], traj_index[i])].append(scores[i])
    for (idx, t_idx), reward_list in traj_accumulator.items():
        if group_by_agent_id:
            id2score[idx].extend(reward_list)
        else:
            avg_score = np.mean(reward_list)
            traj2avg[(idx, t_idx)] = avg_score
            id2score[idx].append(avg_score)
    if not group_by_agent_id:
        for i in range(bsz):
            scores[i] = traj2avg[(index[i], traj_index[i])]
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx], id2std[idx] = 0.0, 1.0
        else:
            id2mean[idx] = np.mean(id2score[idx])
            id2std[idx] = np.std(id2score[idx], ddof=1)  # torch.std is unbiased
    for i in range(bsz):
        if norm_adv_by_std_in_grpo:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:
            scores[i] = scores[i] - id2mean[index[i]]
    return scores


def ref_episode_norm_reward(scores, index, traj_index, remove_std, group_by_agent_id, epsilon=EPS):
    """core_algos.py:237-303, GiGPO's episode level: every row with the flag on, else each trajectory's first row."""
    scores = np.array(scores, dtype=np.float64)
    id2score, id2mean, id2std, seen_pairs = defaultdict(list), {}, {}, set()
    for i in range(scores.shape[0]):
        if (index[i], traj_index[i]) in seen_pairs:
            continue
        id2score[index[i]].append(scores[i])
        if not group_by_agent_id:
            seen_pairs.add((index[i], traj_index[i]))
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx], id2std[idx] = 0.0, 1.0
        else:
            id2mean[idx] = np.mean(id2score[idx])
            id2std[idx] = np.std(id2score[idx], ddof=1)
    for i in range(scores.shape[0]):
        if remove_std:
            scores[i] = scores[i] - id2mean[index[i]]
        else:
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    return scores


def ref_rloo(scores, index, traj_index, group_by_agent_id):
    """core_algos.py:680-721, compute_rloo_outcome_advantage."""
    scores = np.array(scores, dtype=np.float64)
    id2score, id2mean, seen_pairs = defaultdict(list), {}, set()
    for i in range(scores.shape[0]):
        if (index[i], traj_index[i]) in seen_pairs:
            continue
        id2score[index[i]].append(scores[i])
        if not group_by_agent_id:
            seen_pairs.add((index[i], traj_index[i]))
    for idx in id2score:
        id2mean[idx] = 0.0 if len(id2score[idx]) == 1 else np.mean(id2score[idx])
    for i in range(scores.shape[0]):
        n = len(id2score[index[i]])
        if n > 1:
            scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
    return scores


# --------------------------------------------------------------------------- seeded team batches


def team_batch(seed, num_agents, invalid_share=0.3, first_rows_valid=False):
    """Episode-major rows, as the reference gathers them: 1-3 groups of 2-4 episodes of 1-5 turns.

    Each turn's agent is drawn from `num_agents`, so agents act only sometimes: some segments hold one row and
    some agents are absent from a group (over the seeds and 1-3 agents: 35 of 120 batches have a one-row
    segment, 10 an agent absent from a group, and the three arms differ in 80). Episode returns are in {0, 1, 10}, on the last turn; each row is
    invalid with probability `invalid_share`.
    """
    rng = np.random.default_rng(seed)
    names = ["planner", "solver", "verifier"][:num_agents]
    cols = defaultdict(list)
    episode = 0
    for group in range(int(rng.integers(1, 4))):
        for _ in range(int(rng.integers(2, 5))):
            length = int(rng.integers(1, 6))
            ret = float(rng.choice([0.0, 1.0, 10.0]))
            for t in range(length):
                cols["group"].append(group)
                cols["episode"].append(episode)
                cols["step"].append(t)
                cols["reward"].append(ret if t == length - 1 else 0.0)
                valid = rng.random() >= invalid_share or (first_rows_valid and t == 0)
                cols["valid"].append(bool(valid))
                cols["agent"].append(names[int(rng.integers(num_agents))])
            episode += 1
    batch = {k: np.asarray(v) for k, v in cols.items()}
    returns = np.bincount(batch["episode"], weights=batch["reward"])
    batch["score"] = returns[batch["episode"]] - C * ~batch["valid"]  # the reference's token_level_rewards.sum
    return batch


def columns(b):
    return b["group"], b["episode"], b["step"], b["reward"], b["valid"]


SEEDS = range(40)
AGENTS = [1, 2, 3]

# The three arms of langfengQ/DrMAS#81, as agentrl's keys and as the reference's (group key, flag).
ARMS = {
    "trajectory means, global": (dict(episode_stats="episode_means", norm_scope="global"), (False, False)),
    "rows, global": (dict(episode_stats="rows", norm_scope="global"), (False, True)),
    "rows, agent (Dr. MAS)": (dict(episode_stats="rows", norm_scope="agent"), (True, True)),
}


def reference_index(b, agent_key):
    return ref_group_index(b["group"], b["agent"], agent_key)


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("norm", ["std", "none"])
@pytest.mark.parametrize("num_agents", AGENTS)
@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_matches_the_reference_in_each_arm(arm, norm, num_agents, seed):
    keys, (agent_key, flag) = ARMS[arm]
    b = team_batch(seed, num_agents)
    ours = grpo(*columns(b), norm=norm, invalid_penalty=C, agent=b["agent"], **keys)
    ref = ref_grpo(b["score"], reference_index(b, agent_key), b["episode"], norm == "std", flag)
    np.testing.assert_allclose(ours, ref, **TOL)


@pytest.mark.parametrize("norm", ["std", "none"])
@pytest.mark.parametrize("seed", SEEDS)
def test_episode_means_with_the_agent_scope_is_the_reference_function_on_the_agent_key(norm, seed):
    """The fourth combination: per (episode, agent) means, statistics per (group, agent)."""
    b = team_batch(seed, 3)
    ours = grpo(
        *columns(b), norm=norm, invalid_penalty=C, agent=b["agent"], episode_stats="episode_means", norm_scope="agent"
    )
    ref = ref_grpo(b["score"], reference_index(b, True), b["episode"], norm == "std", False)
    np.testing.assert_allclose(ours, ref, **TOL)


@pytest.mark.parametrize("scope", ["global", "agent"])
@pytest.mark.parametrize("norm", ["std", "none"])
@pytest.mark.parametrize("num_agents", AGENTS)
@pytest.mark.parametrize("seed", SEEDS)
def test_gigpo_episode_level_matches_the_reference_with_the_flag_on(scope, norm, num_agents, seed):
    b = team_batch(seed, num_agents)
    ours = gigpo(
        *columns(b),
        [f"s{t}" for t in b["step"]],
        step_weight=0.0,  # the episode level alone
        norm=norm,
        invalid_penalty=C,
        agent=b["agent"],
        norm_scope=scope,
    )
    index = reference_index(b, scope == "agent")
    ref = ref_episode_norm_reward(b["score"], index, b["episode"], norm == "none", True)
    np.testing.assert_allclose(ours, ref, **TOL)


@pytest.mark.parametrize("norm", ["std", "none"])
@pytest.mark.parametrize("seed", SEEDS)
def test_gigpo_reference_with_the_flag_off_is_the_episodes_mode_when_first_rows_are_valid(norm, seed):
    """The flag-off path counts each trajectory once by its first row's penalised score; agentrl's `episodes` by
    its unpenalised return (a documented deviation). They agree when every first row is valid."""
    b = team_batch(seed, 2, first_rows_valid=True)
    ours = gigpo(
        *columns(b),
        [f"s{t}" for t in b["step"]],
        step_weight=0.0,
        norm=norm,
        invalid_penalty=C,
        agent=b["agent"],
        episode_stats="episodes",
    )
    ref = ref_episode_norm_reward(b["score"], b["group"], b["episode"], norm == "none", False)
    np.testing.assert_allclose(ours, ref, **TOL)


@pytest.mark.parametrize("scope", ["global", "agent"])
@pytest.mark.parametrize("num_agents", AGENTS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_matches_the_reference_with_the_flag_on(scope, num_agents, seed):
    b = team_batch(seed, num_agents)
    ours = rloo(*columns(b), invalid_penalty=C, agent=b["agent"], norm_scope=scope)
    ref = ref_rloo(b["score"], reference_index(b, scope == "agent"), b["episode"], True)
    np.testing.assert_allclose(ours, ref, **TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_reference_with_the_flag_off_is_the_episodes_mode_without_invalid_rows(seed):
    b = team_batch(seed, 2, invalid_share=0.0)
    ours = rloo(*columns(b), invalid_penalty=C, agent=b["agent"], episode_stats="episodes")
    ref = ref_rloo(b["score"], b["group"], b["episode"], False)
    np.testing.assert_allclose(ours, ref, **TOL)


# --------------------------------------------------------------------------- worked by hand (docs/algorithms.md)

# One group. Episode A (won, R = 10): checker, then finisher. Episode B (lost, R = 0): checker, actor, actor.
WORKED = dict(
    group=[0, 0, 0, 0, 0],
    episode=[0, 0, 1, 1, 1],
    step=[0, 1, 0, 1, 2],
    reward=[0.0, 10.0, 0.0, 0.0, 0.0],
    valid=[True] * 5,
)
WORKED_AGENTS = ["checker", "finisher", "checker", "actor", "actor"]


def worked(**kw):
    return grpo(*WORKED.values(), agent=WORKED_AGENTS, **kw)


def test_worked_case_by_hand():
    # Rows, global: scores [10, 10, 0, 0, 0], mu = 4; sigma^2 = (36 + 36 + 3 * 16) / 4 = 30.
    np.testing.assert_allclose(worked(norm="none"), [6, 6, -4, -4, -4])
    np.testing.assert_allclose(worked(norm="std"), np.array([6, 6, -4, -4, -4]) / (np.sqrt(30) + EPS))
    # Rows, agent: checker {10, 0}: mu 5, sigma sqrt(50); the finisher's one row: mu 0, sigma 1; actor {0, 0}: 0.
    np.testing.assert_allclose(worked(norm="none", norm_scope="agent"), [5, 10, -5, 0, 0])
    np.testing.assert_allclose(
        worked(norm="std", norm_scope="agent"), [5 / (np.sqrt(50) + EPS), 10, -5 / (np.sqrt(50) + EPS), 0, 0]
    )
    # Episode means, global (Dr. MAS's Eq. 2): the episodes' means 10 and 0, mu 5.
    np.testing.assert_allclose(worked(norm="none", episode_stats="episode_means"), [5, 5, -5, -5, -5])


def test_an_invalid_row_enters_its_episodes_mean():
    valid = [True, True, True, False, True]  # B's first actor turn: B's mean score is -0.1 / 3
    out = grpo(*list(WORKED.values())[:4], valid, agent=WORKED_AGENTS, norm="none", episode_stats="episode_means")
    b_mean = -C / 3
    mu = (10 + b_mean) / 2
    np.testing.assert_allclose(out, [10 - mu] * 2 + [b_mean - mu] * 3)


def test_a_global_baseline_leaves_agents_a_non_zero_mean_advantage_and_the_agent_scope_removes_it():
    """The gap Dr. MAS addresses: under a global baseline, an agent's mean advantage is mu_k - mu, not 0."""
    for scope, zero in (("global", False), ("agent", True)):
        out = worked(norm="none", norm_scope=scope)
        per_agent = {a: out[[i for i, x in enumerate(WORKED_AGENTS) if x == a]].mean() for a in ("checker", "actor")}
        assert all(np.isclose(m, 0.0) for m in per_agent.values()) == zero, (scope, per_agent)


def test_one_agent_under_the_agent_scope_is_the_global_scope():
    b = team_batch(3, 1)
    for stats in ("rows", "episodes", "episode_means"):
        for_agent = grpo(*columns(b), agent=b["agent"], episode_stats=stats, norm_scope="agent")
        np.testing.assert_array_equal(for_agent, grpo(*columns(b), episode_stats=stats))


def test_no_agent_column_is_one_agent():
    b = team_batch(5, 2)
    np.testing.assert_array_equal(grpo(*columns(b), norm_scope="agent"), grpo(*columns(b)))


def test_agent_scope_result_does_not_depend_on_row_order():
    b = team_batch(11, 3)
    perm = np.random.default_rng(0).permutation(len(b["group"]))
    shuffled = {k: v[perm] for k, v in b.items()}
    for stats in ("rows", "episodes", "episode_means"):
        kw = dict(episode_stats=stats, norm_scope="agent")
        out = grpo(*columns(b), agent=b["agent"], **kw)
        np.testing.assert_allclose(grpo(*columns(shuffled), agent=shuffled["agent"], **kw), out[perm], atol=1e-12)


def test_gigpo_step_groups_never_mix_agents():
    group, episode, step = [0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 1]
    anchor = ["s", "t", "s", "t"]
    assert len(set(step_group_codes(group, anchor, episode=episode, step=step))) == 2
    codes = step_group_codes(group, anchor, episode=episode, step=step, agent=["a", "b", "b", "b"])
    assert codes[0] != codes[2] and codes[1] == codes[3]


def test_bad_agent_arguments():
    b = team_batch(0, 2)
    with pytest.raises(ValueError, match="norm_scope"):
        grpo(*columns(b), norm_scope="team")
    with pytest.raises(ValueError, match="norm_scope"):
        rloo(*columns(b), norm_scope="team")
    with pytest.raises(ValueError, match="equal lengths"):
        grpo(*columns(b), agent=b["agent"][:-1])
    with pytest.raises(ValueError, match="str or int labels"):
        grpo(*columns(b), agent=np.zeros(len(b["group"])))
