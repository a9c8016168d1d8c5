"""A recipe check and the view of a recipe it reads (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from ...model.facts import KNOWN, Gpu, RecipeFacts, StackFacts, VersionSource
from ...model.util import record
from .. import bf16_checks
from ..launchers import llamafactory_env_enabled
from ..versions import at_least, version_tuple

# the distribution each family installs as: where it is installed in the environment read (or given with
# --stack), that environment is the job's, and a package missing from it is missing from the job
FRAMEWORK_DISTRIBUTIONS = {"Axolotl": "axolotl", "LLaMA-Factory": "llamafactory"}

_TRUE = ("true", "t", "yes", "y", "on", "1")  # pydantic's lax bool strings
_FALSE = ("false", "f", "no", "n", "off", "0")


class RecipeView:
    """A recipe's settings as a check reads them, with the machine and stack the framework would see."""

    def __init__(
        self,
        recipe: RecipeFacts,
        gpu: Gpu | None,
        stack: StackFacts,
        sharding: str = "",
        zero_stage: int | None = None,
        distributed: bool | None = None,
        gpu_count: int = 0,
        model_type: str = "",
        stored_quantization: str = "",
        world_size: int | None = None,
        env: dict[str, str] | None = None,
    ):
        self.recipe = recipe
        self.gpu = gpu
        self.stack = stack
        self.sharding = sharding  # "deepspeed" | "fsdp" | "": how the job is sharded, wherever that is set
        self.zero_stage = zero_stage  # the DeepSpeed config's ZeRO stage, when the recipe names a readable one
        self.distributed = distributed  # under a process group (derive.launch.distributed); None: launch unknown
        self.gpu_count = gpu_count  # GPUs the machine shows (0: not known)
        self.model_type = model_type  # the checkpoint's model_type, where the doctor knows it ("" otherwise)
        # the checkpoint's quantization_config.quant_method where it is stored quantized ("gptq"; "" otherwise)
        self.stored_quantization = stored_quantization
        self.world_size = world_size  # WORLD_SIZE each rank gets (derive.launch.world_size); None: not known
        # the launch variables the job starts with, as far as the doctor reads them: the launch line's own, over
        # this machine's (or the snapshot's); a variable set nowhere the doctor reads counts as unset
        self.env = env or {}

    def get(self, key: str, default: object = None) -> object:
        """The setting as written (a dotted path for nested keys); `default` when absent or not a plain value."""
        found = self.recipe.settings.get(key)
        return found.value if found is not None and found.state == KNOWN else default

    def has(self, key: str) -> bool:
        """Written with a value (a key left blank, `max_memory:`, reads as null: not set)."""
        return self.get(key) is not None

    def any_of(self, *keys: str) -> bool:
        return any(self.get(k) for k in keys)

    def typed(self, key: str, default: object = None) -> object:
        """The setting as a pydantic field in lax mode makes it (what an "after" validator sees): "false", "no",
        "0" ... are False, "true", "yes", "1" ... True, a number written as a string is that number."""
        found = self.get(key, default)
        if isinstance(found, str):
            lowered = found.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            for convert in (int, float):
                try:
                    return convert(lowered)
                except ValueError:
                    pass
        return found

    def env_enabled(self, name: str) -> bool:
        return llamafactory_env_enabled(self.env, name)

    def torch_at_least(self, version: str) -> bool:
        return at_least(self.stack, "torch", version)

    def installed(self, name: str, at_least_version: str = "") -> bool | None:
        """Whether the job's environment has this distribution (at this release or newer): True where the
        environment read, --stack or the project's requirements name it; False where the environment read has the
        recipe's framework but not it; None where the doctor did not read the job's environment (a laptop that
        checks a recipe for a cluster)."""
        found = self.stack.packages.get(name)
        if found is not None and found.source != VersionSource.ASSUMED:
            if not at_least_version or not found.version:
                return True
            return version_tuple(found.version) >= version_tuple(at_least_version)
        framework = self.stack.packages.get(FRAMEWORK_DISTRIBUTIONS.get(self.recipe.family, ""))
        if framework is not None and framework.source in (VersionSource.INSTALLED, VersionSource.GIVEN):
            return False
        return None

    def bf16_answer(self) -> bool:
        """transformers' is_torch_bf16_gpu_available() on this GPU and stack (what `bf16: auto` asks)."""
        return bf16_checks.answers(self.gpu, self.stack, bf16_checks.TRANSFORMERS)


@record
class RecipeCheck:
    """One check a framework runs on a recipe, mirrored."""

    family: str  # "Axolotl" | "LLaMA-Factory"
    source: str  # the file and lines mirrored, at the release the family's reader names
    action: str  # "refuses" | "warns" | "advises" (an info-level log line)
    message: str  # the framework's own message (what the user would see); `says` gives the branch that fires
    keys: tuple[str, ...]  # the settings it reads: shown as evidence where the recipe writes them
    test: Callable[[RecipeView], bool]
    fix: str
    fires: str  # a recipe (YAML) the framework refuses or warns about
    accepted: str  # its twin, accepted without that message
    target: str = "a100"  # the GPU both examples are checked on
    gpu: bool = False  # the check asks the GPU: silent while the GPU is unknown
    consequence: str = ""  # for a warning: what the job does if it goes ahead
    truth: str = ""  # where the framework's check is wrong for the hardware, what is true
    versions: dict[str, str] = field(default_factory=dict)  # stack overrides for the firing example
    accepted_versions: dict[str, str] = field(default_factory=dict)  # stack overrides for the accepted twin
    files: dict[str, str] = field(default_factory=dict)  # files beside both examples (a DeepSpeed config)
    accepted_target: str = ""  # the GPU the accepted twin is checked on, when not `target`
    launcher: str = ""  # how both examples are launched ("" : not given)
    accepted_launcher: str = ""  # how the accepted twin is launched, when not `launcher`
    says: Callable[[RecipeView], str] | None = None  # the message of the branch that fires, when it has several
    raises: str = "ValueError"  # the exception the framework raises (DeprecationWarning, NotImplementedError, ...)
    reads_launch: bool = False  # the check depends on how the job is launched: the launch is evidence
    reads_checkpoint: bool = False  # the check depends on how the checkpoint is stored: its config is evidence

    def message_for(self, view: RecipeView) -> str:
        return self.says(view) if self.says is not None else self.message

    @property
    def id(self) -> str:
        return f"{self.family}:{self.source}"
