"""On PYTHONPATH of the CPU FSDP test only: let accelerate take its FSDP path over gloo.

accelerate shards on accelerators only: on a machine without one, a rank launched with an FSDP config
comes out as DistributedType.NO, with no process group, and trains alone. PyTorch's FSDP 2
(`fully_shard`) itself runs on CPU over gloo, so this hook gives accelerate what it lacks:
- in the launching process, agentrl's checks accept hardware.strategy=fsdp on CPU;
- in each rank, the ranks start as MULTI_CPU over gloo, and the accelerator state then takes FSDP with
  the plugin accelerate built from its config.
Everything after that (wrapping, sharded steps, the full state dict of a checkpoint) is accelerate's,
TRL's and agentrl's own code.
"""

import os

import agentrl.config.checks

agentrl.config.checks.STRATEGIES_ON_CPU.add("fsdp")

if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and "LOCAL_RANK" in os.environ:
    import accelerate.state as _state
    from accelerate.utils import DistributedType

    _prepare_backend = _state.PartialState._prepare_backend

    def _gloo_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        return _prepare_backend(self, True, sagemaker_dp, backend)

    _state.PartialState._prepare_backend = _gloo_backend
    _init = _state.AcceleratorState.__init__

    def _init_with_fsdp(self, *args, fsdp_plugin=None, **kwargs):
        _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            _state.PartialState._shared_state["distributed_type"] = self.distributed_type  # as accelerate does

    _state.AcceleratorState.__init__ = _init_with_fsdp
