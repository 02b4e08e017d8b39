"""How `import kolong` hooks into transformers without importing it (or torch).

`import kolong` costs milliseconds: it imports neither torch nor transformers. kolong's additions to
transformers are attached when transformers itself loads the module concerned, by a post-import hook (a
finder on `sys.meta_path` that runs a callback right after the module has executed). The callbacks only
wrap methods; kolong's classes are imported and registered on the first *call*, when no import is in
progress, so transformers' own circular imports (modeling_utils -> auto modules -> ...) never see a
half-loaded kolong:

| transformers module | wrapped                                      | on the first call, kolong                      |
|---------------------|----------------------------------------------|------------------------------------------------|
| `configuration_auto`| `AutoConfig.from_pretrained`, `for_model`    | registers configs "kolong", "kolong-byte", "kolong-dependency-parser" |
| `modeling_auto`     | `from_pretrained`, `from_config` of every `AutoModel*` | registers the encoder and byte models; installs the keep-short position-id hook on the loaded model when its config asks (kolong/extension/scaling.py) |
| `tokenization_auto` | `AutoTokenizer.from_pretrained`              | registers `MorphemeTokenizer`, `ByteTokenizer` |

So `import kolong` then `AutoModel.from_pretrained(kolong_checkpoint)` works as with an eager import, in
either order: a module transformers has already loaded is wrapped at once. Code that reads transformers'
mapping tables directly (`CONFIG_MAPPING["kolong"]`) sees kolong's entries after `kolong.integration.register()`
or any of the calls above.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
from collections.abc import Callable

from kolong.constants import POSITION_SCALING_KEY

_pending: dict[str, list[Callable[[], None]]] = {}
_executed: set[str] = set()  # watched modules whose code has run (their spec still says "initializing")
_lock = threading.RLock()


class _RunAfterExec(importlib.abc.Loader):
    """Wraps a module's loader: executes the module, then the callbacks waiting for it."""

    def __init__(self, loader: importlib.abc.Loader, name: str):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _executed.add(self._name)
        _run_pending(self._name)

    def __getattr__(self, attribute):  # get_source, is_package, ... for tools that ask the loader
        return getattr(self._loader, attribute)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None:
            return None
        spec.loader = _RunAfterExec(spec.loader, fullname)
        return spec


_finder = _PostImportFinder()


def _run_pending(name: str) -> None:
    with _lock:
        callbacks = _pending.pop(name, [])
    for callback in callbacks:
        callback()


def _initializing(name: str) -> bool:
    """Imported but its code has not finished running (we are inside its import)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and name not in _executed and bool(getattr(spec, "_initializing", False))


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Run `callback` once `name` has been imported: now if it already is, else right after its import."""
    with _lock:
        if name not in sys.modules or _initializing(name):
            _pending.setdefault(name, []).append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    callback()


def _once(register: Callable[[], None]) -> Callable[[], None]:
    done = False

    def run() -> None:
        nonlocal done
        if not done:
            register()
            done = True

    return run


def _register_configs() -> None:
    from transformers import AutoConfig

    from kolong.models.byte.configuration import KolongByteConfig
    from kolong.models.encoder.configuration import KolongConfig
    from kolong.models.parsing import DependencyParserConfig

    for config in (KolongConfig, KolongByteConfig, DependencyParserConfig):
        AutoConfig.register(config.model_type, config, exist_ok=True)


def _register_models() -> None:
    from kolong.models.byte import register_auto_classes as register_byte_models
    from kolong.models.encoder import register_auto_classes as register_encoder_models
    from kolong.models.parsing import register_auto_classes as register_parser

    register_encoder_models()
    register_byte_models()
    register_parser()


def _register_tokenizers() -> None:
    from kolong.tokenizers.registration import register_tokenizers

    register_tokenizers()


register_configs = _once(_register_configs)
register_models = _once(_register_models)
register_tokenizers = _once(_register_tokenizers)


def register() -> None:
    """Register everything now (imports torch and transformers)."""
    register_configs()
    register_models()
    register_tokenizers()


def _register_first(
    owner: type, names: tuple[str, ...], register_now: Callable[[], None], then: Callable | None = None
) -> None:
    """Wrap the classmethods `names` of `owner` so that `register_now()` runs before each call (and `then`
    on each result)."""
    for name in names:
        method = owner.__dict__.get(name)
        if not isinstance(method, classmethod) or getattr(method.__func__, "__kolong_wrapped__", False):
            continue
        setattr(owner, name, classmethod(_calling_first(register_now, method.__func__, then)))


def _calling_first(register_now: Callable[[], None], function: Callable, then: Callable | None) -> Callable:
    @functools.wraps(function)
    def wrapper(cls, *args, **kwargs):
        register_now()
        result = function(cls, *args, **kwargs)
        return result if then is None else then(result)

    wrapper.__kolong_wrapped__ = True
    return wrapper


def _wrap_config_auto() -> None:
    module = sys.modules["transformers.models.auto.configuration_auto"]
    _register_first(module.AutoConfig, ("from_pretrained", "for_model"), register_configs)


def _wrap_model_autos() -> None:
    module = sys.modules["transformers.models.auto.modeling_auto"]
    base = sys.modules["transformers.models.auto.auto_factory"]._BaseAutoModelClass
    for value in list(vars(module).values()):
        if isinstance(value, type) and issubclass(value, base) and value is not base:
            _register_first(
                value, ("from_pretrained", "from_config"), register_models, _with_position_scaling
            )


def _with_position_scaling(model):
    """A model whose config asks for keep-short scaling (a stock class such as `BertModel` knows nothing of it)
    gets its position-id hook (kolong/extension/scaling.py); `output_loading_info=True` returns a tuple."""
    loaded = model[0] if isinstance(model, tuple) else model
    if getattr(getattr(loaded, "config", None), POSITION_SCALING_KEY, None):
        from kolong.extension.scaling import install_position_scaling

        install_position_scaling(loaded)
    return model


def kolong_class(name: str):
    """kolong's model class of that name (a config's `architectures` entry), or None."""
    import kolong.models as kolong_models

    return getattr(kolong_models, name, None)


def prepare_loaded(model):
    """What a model loaded through a concrete class (not an Auto class) still needs from kolong: keep-short
    scaling where its config asks for it, and BigBird's block-sparse attention in linear memory (one short window
    must not turn every later one to full attention, nor a long one cost n^2 memory). Returns the model."""
    from kolong.extension.block_sparse import run_block_sparse

    _with_position_scaling(model)
    run_block_sparse(model)
    return model


def _wrap_tokenizer_auto() -> None:
    module = sys.modules["transformers.models.auto.tokenization_auto"]
    _register_first(module.AutoTokenizer, ("from_pretrained",), register_tokenizers)


def quiet_torchao_import() -> None:
    """Where torchao is installed (kolong's compress extra), transformers imports it when it loads any model;
    its import logs the CUDA-only kernels a CPU build cannot load, and torch logs a deprecation for each enum
    torchao registers: lines about neither the user's model nor their code. Their loggers are set to errors
    only, unless the application has set a level of its own."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.ERROR)


def install() -> None:
    """Called once by `import kolong`."""
    quiet_torchao_import()
    auto = "transformers.models.auto."
    after_import(auto + "configuration_auto", _wrap_config_auto)
    after_import(auto + "modeling_auto", _wrap_model_autos)
    after_import(auto + "tokenization_auto", _wrap_tokenizer_auto)
    after_import("transformers.pipelines", _register_pipeline)


def _register_pipeline() -> None:
    from kolong.pipelines import register_pipeline

    register_pipeline()
