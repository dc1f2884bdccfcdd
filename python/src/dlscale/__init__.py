"""dlscale worker library: what a training script needs to run as an elastic dlscale job."""
from .checkpoint import (DirectoryStore, UnloadableCheckpoint, list_checkpoints, load_latest_checkpoint,
                         save_checkpoint)
from .env import Allocation, EnvError
from .job import STOP_CHECK_S, Job, init
from .loader import ElasticLoader, StreamBatches
from .lr import LrScaling, rescale_lr, scaled_lr, set_lr
from .metrics import MetricsReporter, metrics_payload
from .noise import GradNoiseEstimator, register_ddp_hook, sqr_norm, track_micro_batches
from .sampler import ElasticSampler
from .stop import EXIT_BAD_ENV, EXIT_DONE, EXIT_STOPPED, StopFlag, Stopped, install_stop_handler, stop_exit_code

__version__ = "0.1.0"

__all__ = [
    "Allocation", "DirectoryStore", "EnvError", "ElasticLoader", "ElasticSampler", "LrScaling", "STOP_CHECK_S", "StreamBatches", "GradNoiseEstimator", "Job", "MetricsReporter", "StopFlag", "Stopped",
    "UnloadableCheckpoint",
    "EXIT_BAD_ENV", "EXIT_DONE", "EXIT_STOPPED", "init", "install_stop_handler", "list_checkpoints",
    "load_latest_checkpoint", "metrics_payload", "register_ddp_hook", "rescale_lr", "save_checkpoint", "scaled_lr",
    "set_lr", "sqr_norm", "stop_exit_code", "track_micro_batches", "__version__",
]
