"""dlscale worker library: what a training script needs to run as an elastic dlscale job."""
from .checkpoint import list_checkpoints, load_latest_checkpoint, save_checkpoint
from .env import Allocation, EnvError
from .job import Job, init
from .lr import scaled_lr, set_lr
from .metrics import MetricsReporter, metrics_payload
from .sampler import ElasticSampler
from .stop import EXIT_BAD_ENV, EXIT_DONE, EXIT_STOPPED, StopFlag, install_stop_handler, stop_exit_code

__version__ = "0.1.0"

__all__ = [
    "Allocation", "EnvError", "ElasticSampler", "Job", "MetricsReporter", "StopFlag",
    "EXIT_BAD_ENV", "EXIT_DONE", "EXIT_STOPPED", "init", "install_stop_handler", "list_checkpoints",
    "load_latest_checkpoint", "metrics_payload", "save_checkpoint", "scaled_lr", "set_lr",
    "stop_exit_code", "__version__",
]
