"""Hardware profiles, multi-process strategies and the hyper-parameter search config: each composes, each
accelerate config is one that accelerate itself reads, and a combination that cannot work is a one-line error."""

from __future__ import annotations

import os

import pytest
from hydra import compose
from omegaconf import OmegaConf

from agentrl.cli.launch import config_dir, normalise_args
from agentrl.config.checks import check_config
from agentrl.config.typed import typed
from agentrl.config.values import Strategy
from agentrl.errors import UserError
from tests.conftest import REPO
from tests.extras import vllm_installed

CONF = config_dir()
STRATEGIES = [s.value for s in Strategy if s != Strategy.ddp]  # ddp needs no config file
VLLM_INSTALLED = vllm_installed()


# --------------------------------------------------------------------------- profiles


@pytest.mark.parametrize("profile,processes", [("cpu", 1), ("cpu_ddp", 2)])
def test_cpu_profiles_pass_the_checks(hydra_conf, profile, processes):
    cfg = typed(compose(config_name="train", overrides=[f"hardware={profile}"]))
    check_config(cfg)
    assert cfg.hardware.device.value == "cpu" and cfg.hardware.precision.value == "fp32"
    assert cfg.hardware.num_processes == processes and cfg.rollout.backend.value == "hf"
    assert cfg.hardware.strategy == Strategy.ddp


@pytest.mark.parametrize(
    "profile,processes,backend", [("gpu", 1, "hf"), ("multi_gpu", 8, "vllm"), ("slurm", 8, "vllm")]
)
def test_gpu_profiles_compose_for_cuda(hydra_conf, profile, processes, backend):
    from agentrl.train.distributed import needs_launch

    cfg = typed(compose(config_name="train", overrides=[f"hardware={profile}"]))
    assert cfg.hardware.device.value == "cuda" and cfg.hardware.precision.value == "bf16"
    assert cfg.hardware.num_processes == processes and cfg.rollout.backend.value == backend
    assert needs_launch(cfg.hardware) == (processes > 1)  # with DDP, the number of processes alone decides


def test_a_sharded_strategy_is_launched_even_on_one_rank(hydra_conf, monkeypatch):
    """accelerate wraps a model for FSDP or DeepSpeed only in processes its launcher started; the rank it starts
    must not launch again."""
    from agentrl.train.distributed import needs_launch
    from agentrl.train.stopping import LAUNCHER_PID

    monkeypatch.delenv(LAUNCHER_PID, raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for strategy in ("fsdp", "deepspeed_zero3"):
        cfg = typed(compose(config_name="train", overrides=["hardware=gpu", f"hardware.strategy={strategy}"]))
        assert needs_launch(cfg.hardware)
        monkeypatch.setenv(LAUNCHER_PID, "123")  # inside the rank that agentrl launched
        assert not needs_launch(cfg.hardware)
        monkeypatch.delenv(LAUNCHER_PID)


def test_slurm_profile_submits_through_submitit(hydra_conf):
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher",
        reason="needs the sweep extra (hydra-submitit-launcher): pip install -e '.[sweep]'",
    )
    cfg = compose(config_name="train", overrides=["hardware=slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.agentrl_requeue.SlurmLauncher"  # submitit's, requeued jobs resume
    assert launcher.max_num_timeout > 0  # submitit requeues a timed-out job only up to this many times
    assert launcher.gpus_per_node == 8 and launcher.tasks_per_node == 1 and launcher.nodes == 1
    four = compose(
        config_name="train", overrides=["hardware=slurm", "hardware.num_processes=4"], return_hydra_config=True
    )
    assert four.hydra.launcher.gpus_per_node == 4  # one GPU per training rank
    assert OmegaConf.select(four, "hydra.launcher.submitit_folder").startswith(four.hydra.sweep.dir)


# --------------------------------------------------------------------------- strategies


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategies_compose_and_pick_their_accelerate_config(hydra_conf, strategy):
    from agentrl.train.distributed import config_file

    cfg = typed(
        compose(
            config_name="train", overrides=["hardware=multi_gpu", f"hardware.strategy={strategy}", "rollout.backend=hf"]
        )
    )
    check_config(cfg)
    assert cfg.hardware.strategy.value == strategy
    path = config_file(cfg.hardware)
    assert path == CONF / "accelerate" / f"{strategy}.yaml" and path.is_file()


def test_every_accelerate_config_is_a_strategy():
    assert sorted(p.stem for p in (CONF / "accelerate").glob("*.yaml")) == sorted(STRATEGIES)


@pytest.mark.parametrize(
    "strategy,distributed_type,zero_stage",
    [
        ("deepspeed_zero2", "DEEPSPEED", 2),
        ("deepspeed_zero3", "DEEPSPEED", 3),
        ("fsdp", "FSDP", None),
    ],
)
def test_accelerate_configs_load_with_accelerate(strategy, distributed_type, zero_stage):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    loaded = load_config_from_file(str(CONF / "accelerate" / f"{strategy}.yaml"))
    assert isinstance(loaded, ClusterConfig)
    assert str(getattr(loaded.distributed_type, "value", loaded.distributed_type)) == distributed_type
    assert loaded.num_machines == 1 and loaded.mixed_precision == "bf16" and not loaded.use_cpu
    if zero_stage is None:
        assert loaded.fsdp_config["fsdp_version"] == 2 and not loaded.deepspeed_config
    else:
        assert loaded.deepspeed_config["zero_stage"] == zero_stage and not loaded.fsdp_config


# --------------------------------------------------------------------------- combinations that cannot work

SEMANTIC_ERRORS = {
    "no training process": (["hardware.num_processes=0"], "hardware.num_processes must be >= 1, got 0"),
    "deepspeed on cpu": (["hardware=cpu_ddp", "hardware.strategy=deepspeed_zero2"], "needs GPUs"),
    "vllm keys with the hf backend": (
        ["rollout.vllm.gpu_memory_utilization=0.5"],
        "has no effect with rollout.backend=hf",
    ),
    "lora keys with lora off": (["model.lora.rank=8"], "has no effect while model.lora.enabled=false"),
}


@pytest.mark.parametrize("case", list(SEMANTIC_ERRORS))
def test_semantic_errors_from_check_config(hydra_conf, case):
    overrides, expected = SEMANTIC_ERRORS[case]
    cfg = typed(compose(config_name="train", overrides=overrides))
    with pytest.raises(UserError) as err:
        check_config(cfg)
    assert expected in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("case", list(SEMANTIC_ERRORS))
def test_semantic_errors_end_the_command_in_one_line(case, run_cli):
    overrides, expected = SEMANTIC_ERRORS[case]
    result = run_cli("train", *overrides, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert "Traceback" not in result.stdout + result.stderr


# --------------------------------------------------------------------------- what this machine lacks: only at run time

HOST_ERRORS = {
    "vllm backend without vllm": (["rollout.backend=vllm"], "pip install 'agentrl[vllm]'"),
    "cuda without a GPU": (["hardware=gpu"], "hardware.device=cuda needs a CUDA GPU"),
    "slurm profile on a machine without GPUs": (["hardware=slurm"], "needs a CUDA GPU"),
}


def _skip_if_the_host_has_it(case: str) -> None:
    import torch

    if case.startswith("vllm") and VLLM_INSTALLED:
        pytest.skip("vLLM is installed here, so the missing-vLLM message cannot show")
    if "GPU" in case and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")


@pytest.mark.parametrize("case", list(HOST_ERRORS))
def test_host_checks_are_not_config_checks(hydra_conf, case):
    """A config that needs what this machine lacks composes and passes check_config; check_host refuses it."""
    from agentrl.config.checks import check_host

    _skip_if_the_host_has_it(case)
    overrides, expected = HOST_ERRORS[case]
    cfg = typed(compose(config_name="train", overrides=overrides))
    check_config(cfg)
    with pytest.raises(UserError) as err:
        check_host(cfg)
    assert expected in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("case", list(HOST_ERRORS))
def test_config_prints_on_any_machine_and_a_run_refuses_in_one_line(case, run_cli):
    _skip_if_the_host_has_it(case)
    overrides, expected = HOST_ERRORS[case]
    shown = run_cli("config", *overrides, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "hardware:" in shown.stdout and "trainer:" in shown.stdout
    notes = [line for line in shown.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: ") and expected in notes[0], notes
    printed = run_cli("train", *overrides, "--cfg", "job", timeout=300)
    assert printed.returncode == 0 and "hardware:" in printed.stdout, printed.stderr[-2000:]
    if "slurm" in case:
        return  # without -m the slurm profile runs here, as multi_gpu would: the case above covers it
    refused = run_cli("train", *overrides, "logger=none", timeout=300)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and lines == [lines[0]] and lines[0].startswith("error: ") and expected in lines[0]


@pytest.mark.parametrize(
    "args,plugin",
    [
        (["-m", "hparams_search=optuna"], "hydra/sweeper=optuna"),
        (["-m", "hardware=slurm", "seed=0,1"], "hydra/launcher=submitit_slurm"),
    ],
)
def test_missing_hydra_plugin_says_how_to_install_it(args, plugin, run_cli, tmp_path):
    hide = tmp_path / "no-plugins"
    (hide / "hydra_plugins").mkdir(parents=True)
    (hide / "hydra_plugins" / "__init__.py").write_text("")  # a regular package hides every installed plugin
    result = run_cli("train", *args, env={"PYTHONPATH": f"{hide}{os.pathsep}{REPO}"})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2
    assert lines == [f"error: {plugin} needs a Hydra plugin that is not installed: pip install 'agentrl[sweep]'"]


# --------------------------------------------------------------------------- hyper-parameter search


def test_optuna_search_composes(hydra_conf):
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper",
        reason="needs the sweep extra (hydra-optuna-sweeper): pip install -e '.[sweep]'",
    )
    for overrides in (["+hparams_search=optuna"], normalise_args(["hparams_search=optuna"])):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
        sweeper = cfg.hydra.sweeper
        assert sweeper._target_ == "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
        assert str(sweeper.direction).rsplit(".", 1)[-1] == "maximize"
        assert sweeper.sampler._target_ == "optuna.samplers.TPESampler" and isinstance(sweeper.sampler.seed, int)
        assert sweeper.n_jobs == 1 and 1 <= sweeper.n_trials <= 50
        assert cfg.hydra.launcher._target_.endswith("BasicLauncher")
        for key in sweeper.params:  # every searched key is one the schema has
            assert OmegaConf.select(cfg, str(key), default="absent") not in ("absent", None), key
    job = typed(compose(config_name="train", overrides=["+hparams_search=optuna"]))
    check_config(job)  # the job config itself is untouched
    assert not hasattr(job, "hparams_search")
