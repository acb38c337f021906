"""Work ansible-core 2.18, Jinja and Mitogen repeat for every task and host in the strategy's process, done once.

On the 1-node lab's no-op re-provision, the ansible-playbook process spent about half of its CPU time on the first two
(docs/ansible-settings.md, "The strategy process's repeated work"):

- **The host's facts, wrapped and cleaned again for every task.** `VariableManager.get_vars` takes the host's facts
  from the fact cache and, for each of the run's ~520 calls, wraps every value as unsafe (`wrap_var`), copies them
  under `ansible_facts` (`namespace_facts`), copies them once more while deleting the keys facts may not set
  (`clean_facts`, which matches every fact name against a pattern per connection plugin), and wraps that copy again:
  1-2.5 ms a call, 0.9 s of the run. `install_fact_memo` keeps each of those results, keyed by the facts' content
  (their pickle, hashed), and hands `get_vars` a fresh copy of it, so no two calls share a mutable object, as before.
  Facts that changed (a setup or set_fact result, a cleared cache) pickle differently and are computed anew.
- **Every template compiled again.** Ansible's Templar compiles each string it templates (`Environment.from_string`:
  Jinja's lexer, parser, code generator and Python's `compile`), 2 ms each, ~520 times a run; the same conditional is
  compiled again for each host and each time a task file is included. `install_template_cache` keeps the compiled
  code of each template for the environment's settings that shape the code, and the plugin directories that decide
  which filter and test each name is. A template whose compilation called a filter or test (Jinja folds a filter with
  constant arguments into the code: `{{ 6 | random }}`, a password hash with a constant salt) is compiled every time,
  as before, so such a call still happens once per templating. With NODEFORGE_TEMPLATE_CACHE (nodeforge's runs set
  it under the state directory), `TemplateStore` keeps that code between runs too, as Python keeps bytecode: the
  next run compiles only the templates no earlier run compiled (0.54 s of compilation in the 1-node lab's no-op).
- **Every module_utils file compiled again for each module.** Before a module first runs in a run, Mitogen's
  multiplexer lists the module_utils it imports (ansible_mitogen.module_finder.scan) by compiling the module and,
  one after the other, every module_utils file it reaches: about 24 files and 35 ms per module, 30 of them for
  files (basic.py and its imports) the previous module's scan had just compiled. `install_module_scan_cache` gives
  that scan a `compile` that keeps the code object of each source it compiled.

- **Every installed collection listed again for each task running a collection module.** Mitogen's planner adds
  every collection's directory to such a module's search path, through list_collection_dirs() (0.27 s: it imports
  ~100 collections and parses each one's meta/runtime.yml), once per process, and workers are forked per task.
  `install_collection_dirs_once` lists them once, before the workers fork.

The results are the same objects ansible-core, Jinja and Python would compute; only the repetition goes. All four
are installed in the strategy's process (ansible_settings.prepare_strategy_process), whose forked workers and
Mitogen's multiplexer inherit them. The first three keep a bounded Lru (MEMO_BYTES / TEMPLATES_MAX / CODE_MAX), least
recently used first out.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import marshal
import os
import pickle
import sys
import tempfile
import threading
import types
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

# The facts memo's bound, counted in pickled input: a host's facts make four results, each counted at the size of
# the facts' pickle. The lab's facts pickle to 7 KB: 27 KB counted and about 100 KB of memory per host, so about
# 1,200 such hosts fit (some 120 MB); with 100 KB of full facts, about 80. Beyond that the least recently used
# results go and are computed again, as without the memo, plus one pickle per call.
MEMO_BYTES = 32 * 1024 * 1024
# Compiled templates kept: a run of the node stack compiles ~360 distinct ones.
TEMPLATES_MAX = 8192
# Compiled templates kept on disk between runs (TemplateStore): those of the latest run first, then older ones. A run
# of the node stack compiles ~300 that can be kept, 1-4 KB of code each.
TEMPLATES_STORED_MAX = 4096
# A store file larger than this is not read (a few MB at TEMPLATES_STORED_MAX).
TEMPLATES_STORE_BYTES_MAX = 64 * 1024 * 1024
# Compiled module and module_utils files kept by Mitogen's module scan: ansible-core's module_utils are ~100 files.
CODE_MAX = 1024


# The functions VariableManager.get_vars (ansible/vars/manager.py) applies to a host's facts.
FACT_FUNCTIONS = ("wrap_var", "namespace_facts", "clean_facts")


class Lru:
    """Entries by key, the least recently used dropped first while their sizes add up to more than the budget (an
    entry's size is 1 where the budget counts entries)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def get(self, key: Any) -> Any:
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.entries.move_to_end(key)
        return entry[0]

    def put(self, key: Any, value: Any, size: int = 1) -> None:
        old = self.entries.pop(key, None)
        if old is not None:
            self.used -= old[1]
        self.entries[key] = (value, size)
        self.used += size
        while self.used > self.budget and len(self.entries) > 1:
            _, (_, dropped) = self.entries.popitem(last=False)
            self.used -= dropped


class _Uncopyable(Exception):
    """A result holds a mutable object fresh() cannot copy: it is not kept."""


# Values wrap_var and clean_facts leave as they are and that no one can change in place: shared by the copies.
IMMUTABLE = (str, bytes, int, float, complex, frozenset, type(None))


def fresh(value: Any) -> Any:
    """A copy of `value` that shares no mutable object with it: dicts, lists, tuples and sets (of exactly those types,
    as wrap_var and clean_facts build them) are rebuilt, strings, numbers and None are shared. Anything else raises
    _Uncopyable, and the result holding it is not kept."""
    kind = type(value)
    if kind is dict:
        return {key: fresh(item) for key, item in value.items()}
    if kind is list:
        return [fresh(item) for item in value]
    if kind is tuple:
        return tuple(fresh(item) for item in value)
    if kind is set:
        return {fresh(item) for item in value}
    if isinstance(value, IMMUTABLE):
        return value
    raise _Uncopyable(kind.__name__)


def content_key(value: Any) -> tuple[bytes, int] | None:
    """A digest of `value`'s content and types (its pickle: True, 1 and 1.0, a tuple and a list all differ) and the
    pickle's size, or None when it cannot be pickled."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    return hashlib.blake2b(data, digest_size=20).digest(), len(data)


class FactMemo:
    """Results of the fact functions get_vars calls, keyed by the content of their input."""

    def __init__(self, budget: int = MEMO_BYTES) -> None:
        self.entries = Lru(budget)  # (function name, input digest) -> result, sized by the input's pickle
        # The copies handed out, with the key of what they are a copy of: the next function get_vars applies to one
        # of them finds its key here instead of pickling it (at most the last few, held so their ids stay theirs).
        self.handed: OrderedDict[int, tuple[Any, bytes, int]] = OrderedDict()

    def call(self, name: str, function: Callable[[Any], Any], value: Any) -> Any:
        origin = self.handed.get(id(value))
        if origin is not None and origin[0] is value:
            key, size = origin[1], origin[2]
        else:
            content = content_key(value) if type(value) is dict else None
            if content is None:
                return function(value)
            key, size = content
        cached = self.entries.get((name, key))
        if cached is None:
            result = function(value)
            try:
                copy = fresh(result)
            except _Uncopyable:
                return result
            self.entries.put((name, key), result, size)
        else:
            copy = fresh(cached)
        self._hand((name, key), copy, size)
        return copy

    def _hand(self, key: tuple[str, bytes], copy: Any, size: int) -> None:
        # What was computed from this copy is keyed by what the copy came from, and by the function that made it.
        self.handed[id(copy)] = (copy, hashlib.blake2b(repr(key).encode(), digest_size=20).digest(), size)
        while len(self.handed) > 4:
            self.handed.popitem(last=False)


def install_fact_memo(memo: FactMemo | None = None) -> FactMemo | None:
    """Point ansible-core's VariableManager (2.18) at memoised wrap_var, namespace_facts and clean_facts; None when
    this ansible-core's get_vars does not use them (then nothing changes)."""
    from ansible.vars import manager

    if not all(callable(getattr(manager, name, None)) for name in FACT_FUNCTIONS):
        return None
    memo = memo or FactMemo()
    for name in FACT_FUNCTIONS:
        original = getattr(manager, name)
        original = getattr(original, "nodeforge_original", original)

        def memoised(value, name=name, original=original):
            return memo.call(name, original, value)

        memoised.nodeforge_original = original
        setattr(manager, name, memoised)
    return memo


# --- compiled templates ---

_folding = threading.local()


def _note_folding(original: Callable) -> Callable:
    """Jinja's constant folding of a filter or test (nodes._FilterTestCommon.as_const): note when it called the
    function (it returned, or raised from inside the call), so that the template it was folded into is not kept."""
    from jinja2 import nodes

    def as_const(self, eval_ctx=None):
        try:
            value = original(self, eval_ctx)
        except nodes.Impossible as error:
            if error.__cause__ is not None:
                _folding.called = True
            raise
        _folding.called = True
        return value

    as_const.nodeforge_original = original
    return as_const


def environment_key(env: Any) -> tuple:
    """What of a Templar's environment shapes the code Jinja generates for a template: the environment's class, its
    lexer's syntax, the code generator's switches, its finalize function and extensions, and which filter and test
    plugin directories a name can resolve to (a role's own filter_plugins add one)."""
    from ansible.plugins.loader import filter_loader, test_loader
    from jinja2.utils import _PassArg

    finalize = env.finalize
    return (
        type(env),
        env.block_start_string,
        env.block_end_string,
        env.variable_start_string,
        env.variable_end_string,
        env.comment_start_string,
        env.comment_end_string,
        env.line_statement_prefix,
        env.line_comment_prefix,
        env.trim_blocks,
        env.lstrip_blocks,
        env.newline_sequence,
        env.keep_trailing_newline,
        env.optimized,
        env.is_async,
        env.autoescape,
        None if finalize is None else (getattr(finalize, "__wrapped__", finalize), _PassArg.from_obj(finalize)),
        tuple(sorted(env.extensions)),
        env.code_generator_class,
        env.context_class,
        tuple(filter_loader._extra_dirs),
        tuple(test_loader._extra_dirs),
    )


def stable_name(thing: Any) -> str | None:
    """A class's or function's module and qualified name (the same in every process), or None when that does not
    name it alone (a lambda, a local function)."""
    module, qualname = getattr(thing, "__module__", None), getattr(thing, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module}.{qualname}"


class _Unstable(Exception):
    """A part of an environment key has no stable name."""


def stable_environment_key(env_key: tuple) -> str | None:
    """An environment_key with each class and function by its stable_name: the same text in every process and run
    for the same settings and plugin directories, or None when a part has no stable name (then nothing is stored)."""

    def stable(part: Any) -> Any:
        if part is None or isinstance(part, (str, bool, int)):
            return part
        if isinstance(part, tuple):
            return tuple(stable(item) for item in part)
        if type(part).__name__ == "_PassArg":  # jinja2.utils._PassArg, an Enum
            return f"_PassArg.{part.name}"
        if isinstance(part, type) or callable(part):
            named = stable_name(part)
            if named is None:
                raise _Unstable
            return named
        raise _Unstable

    try:
        return repr(stable(env_key))
    except _Unstable:
        return None


class TemplateStore:
    """Compiled template code kept in a file between runs, like Python's __pycache__: by a digest of the template's
    text, the compile call's arguments and stable_environment_key, in a file that names the Python (its bytecode
    tag), Jinja and ansible-core it was compiled with; another version's file is ignored. The file is read only when
    it belongs to this user and nobody else may write it, and written whole (a temporary file renamed over it).

    The process that read it (the strategy's) writes it at its end; the workers forked from it write what they
    compiled themselves to files of their own in `<path>.d/` (flush_worker, before they send their result), which
    that save takes in."""

    def __init__(self, path: str, limit: int = TEMPLATES_STORED_MAX) -> None:
        self.path = path
        self.limit = limit
        self.owner = os.getpid()
        self.stored: dict[bytes, types.CodeType] = {}
        self.used: OrderedDict[bytes, types.CodeType] = OrderedDict()
        self.added = 0
        self.hits = 0
        # In a forked worker: what it compiled itself and has not written yet.
        self.worker_added: dict[bytes, types.CodeType] = {}

    @staticmethod
    def header() -> tuple:
        import ansible.release
        import jinja2

        return ("nodeforge-templates", 1, sys.implementation.cache_tag, jinja2.__version__, ansible.release.__version__)

    @staticmethod
    def digest(env_key: str, source: str, name, filename, defer_init) -> bytes:
        text = repr((env_key, source, name, filename, defer_init)).encode("utf-8", "surrogatepass")
        return hashlib.blake2b(text, digest_size=20).digest()

    @classmethod
    def read(cls, path: str) -> dict[bytes, types.CodeType]:
        """A store file's entries; none for a missing, foreign, unsafe, corrupt or other-version file."""
        try:
            with open(path, "rb") as handle:
                status = os.fstat(handle.fileno())
                foreign = status.st_uid != os.geteuid() or status.st_mode & 0o022
                if foreign or status.st_size > TEMPLATES_STORE_BYTES_MAX:
                    return {}
                header, entries = marshal.loads(handle.read())
        except (OSError, ValueError, EOFError, TypeError):
            return {}
        if header != cls.header() or not isinstance(entries, dict):
            return {}
        return {
            key: code for key, code in entries.items() if isinstance(key, bytes) and isinstance(code, types.CodeType)
        }

    def write(self, path: str, entries: dict[bytes, types.CodeType]) -> bool:
        """Write entries whole to path (0600, through a temporary file renamed over it); False when that failed."""
        directory = os.path.dirname(path) or "."
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=directory, prefix=".templates.")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(marshal.dumps((self.header(), entries)))
                os.chmod(temporary, 0o600)
                os.replace(temporary, path)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
        except OSError:
            return False  # a store that cannot be written only costs the next run its compilations
        return True

    def load(self) -> None:
        """Read the store."""
        self.stored = self.read(self.path)

    def get(self, digest: bytes) -> types.CodeType | None:
        code = self.stored.get(digest)
        if code is not None:
            self.hits += 1
            self.used[digest] = code
        return code

    def put(self, digest: bytes, code: types.CodeType) -> None:
        if digest not in self.stored:
            self.added += 1
            if os.getpid() != self.owner:
                self.worker_added[digest] = code
        self.used[digest] = code

    def flush_worker(self) -> None:
        """In a forked worker: write what it compiled to a file of its own in `<path>.d/`."""
        if os.getpid() == self.owner or not self.worker_added:
            return
        if self.write(os.path.join(self.path + ".d", f"{os.getpid()}.marshal"), self.worker_added):
            self.stored.update(self.worker_added)
            self.worker_added = {}

    def take_in_workers(self) -> None:
        """Add the workers' files to this run's templates, and remove them."""
        directory = self.path + ".d"
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return
        for name in names:
            path = os.path.join(directory, name)
            if name.startswith(".") or not name.endswith(".marshal"):
                continue
            for digest, code in self.read(path).items():
                if digest not in self.used:
                    self.used[digest] = code
                    if digest not in self.stored:
                        self.added += 1
            with contextlib.suppress(OSError):
                os.unlink(path)

    def save(self) -> None:
        """Write this run's templates (the workers' too) and then the older ones, up to the limit; nothing when this
        run added none."""
        self.take_in_workers()
        if not self.added:
            return
        entries = dict(self.used)
        for key, code in self.stored.items():
            if len(entries) >= self.limit:
                break
            entries.setdefault(key, code)
        while len(entries) > self.limit:
            entries.pop(next(reversed(entries)))
        if self.write(self.path, entries):
            self.stored, self.added = entries, 0


class TemplateCache:
    """Compiled code of templates, by environment_key and the compile call's arguments; with a TemplateStore, also
    the code earlier runs compiled."""

    def __init__(self, limit: int = TEMPLATES_MAX, store: TemplateStore | None = None) -> None:
        self.entries = Lru(limit)
        self.store = store
        self.hits = 0
        self.misses = 0

    def compile(self, original: Callable, env: Any, source: Any, name=None, filename=None, raw=False, defer_init=False):
        if raw or not isinstance(source, str):
            return original(env, source, name, filename, raw, defer_init)
        try:
            key = (environment_key(env), str(source), name, filename, defer_init)
            hash(key)
        except Exception:
            return original(env, source, name, filename, raw, defer_init)
        code = self.entries.get(key)
        if code is not None:
            self.hits += 1
            return code
        digest = None
        if self.store is not None:
            stable = stable_environment_key(key[0])
            if stable is not None:
                digest = self.store.digest(stable, str(source), name, filename, defer_init)
                code = self.store.get(digest)
                if code is not None:
                    self.entries.put(key, code)
                    return code
        self.misses += 1
        _folding.called = False
        try:
            code = original(env, source, name, filename, raw, defer_init)
        finally:
            folded, _folding.called = _folding.called, False
        if not folded:
            self.entries.put(key, code)
            if digest is not None:
                self.store.put(digest, code)
        return code


def install_template_cache(cache: TemplateCache | None = None) -> TemplateCache:
    """Give Ansible's Jinja environments (AnsibleEnvironment and its native subclass) the cache's compile."""
    from ansible.template import AnsibleEnvironment
    from jinja2 import nodes
    from jinja2.environment import Environment
    from jinja2.utils import internalcode

    common = nodes._FilterTestCommon
    if not hasattr(common.as_const, "nodeforge_original"):
        common.as_const = _note_folding(common.as_const)
    cache = cache or TemplateCache()

    @internalcode  # as Jinja's own compile: left out of the traceback of a template's error
    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        return cache.compile(Environment.compile, self, source, name, filename, raw, defer_init)

    internalcode(TemplateCache.compile)
    compile.nodeforge_cache = cache
    AnsibleEnvironment.compile = compile
    return cache


# The store's file, set by nodeforge's runs (ansible_settings: under the state directory).
TEMPLATE_STORE_VARIABLE = "NODEFORGE_TEMPLATE_CACHE"
_stores: dict[str, TemplateStore] = {}


def template_store_from_environment() -> TemplateStore | None:
    """The TemplateStore that NODEFORGE_TEMPLATE_CACHE names, read now and written when this process exits (not when
    a process forked from it does: workers and Mitogen's multiplexer leave it alone); None without the variable."""
    path = os.environ.get(TEMPLATE_STORE_VARIABLE)
    if not path:
        return None
    if path in _stores:
        return _stores[path]
    store = _stores[path] = TemplateStore(path)
    store.load()

    def save() -> None:
        if os.getpid() == store.owner:
            store.save()

    atexit.register(save)
    _flush_after_each_worker(store)
    return store


def _flush_after_each_worker(store: TemplateStore) -> None:
    """Ansible's worker (one task on one host) writes the templates it compiled itself when its TaskExecutor has the
    result, before the worker sends it: a worker still writing when the play ends would be terminated, with a
    warning. In the strategy's own process (a controller-only task, nodeforge/controller_results.py) it does nothing.
    """
    from ansible.executor.task_executor import TaskExecutor

    original = TaskExecutor.run
    if getattr(original, "nodeforge_store", None) is not None:
        original.nodeforge_store = store
        return

    def run(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            run.nodeforge_store.flush_worker()

    run.nodeforge_store = store
    TaskExecutor.run = run


# --- Mitogen's module scan ---


class CodeCache:
    """Python's compile() for Mitogen's module scan, keeping each code object by a digest of its source, the file
    name and the mode (code objects cannot change; a file whose content changed has another digest)."""

    def __init__(self, limit: int = CODE_MAX, compile_: Callable = compile) -> None:
        self.compile_ = compile_
        self.entries = Lru(limit)

    def __call__(self, source, filename, mode, *args, **kwargs):
        if args or kwargs or not isinstance(source, bytes):
            return self.compile_(source, filename, mode, *args, **kwargs)
        key = (hashlib.blake2b(source, digest_size=20).digest(), len(source), filename, mode)
        code = self.entries.get(key)
        if code is None:
            code = self.compile_(source, filename, mode)
            self.entries.put(key, code)
        return code


def install_module_scan_cache(cache: CodeCache | None = None) -> CodeCache | None:
    """Give ansible_mitogen.module_finder (whose scan compiles each file it reads with the builtin `compile`, looked
    up in its module's globals) the cache's compile; None when that module does not compile files itself."""
    import ansible_mitogen.module_finder as finder

    if not hasattr(finder, "_scan_importlib_find_spec"):
        return None
    current = finder.__dict__.get("compile")
    if isinstance(current, CodeCache):
        return current
    cache = cache or CodeCache()
    finder.compile = cache
    return cache


def collection_dirs() -> list[str]:
    """The installed collections' directories, as ansible.collections.list.list_collection_dirs() lists them (each
    `<root>/ansible_collections/<namespace>/<name>` directory; the first root that has a collection wins), read from
    the directories alone: that function imports every collection's package to find it, parsing each one's
    meta/runtime.yml."""
    import ansible_collections

    found: dict[tuple[str, str], str] = {}
    for root in ansible_collections.__path__:
        if not os.path.isdir(root):
            continue
        for namespace in sorted(os.listdir(root)):
            directory = os.path.join(root, namespace)
            if not namespace.isidentifier() or not os.path.isdir(directory):
                continue
            for name in sorted(os.listdir(directory)):
                path = os.path.join(directory, name)
                if name.isidentifier() and os.path.isdir(path):
                    found.setdefault((namespace, name), path)
    return list(found.values())


def install_collection_dirs_once() -> list[str] | None:
    """Before a collection's module first runs in a process, Mitogen's planner adds every installed collection's
    directory to the module's search path (ansible_mitogen.planner._load_collections), through
    list_collection_dirs(): 0.27 s with the ansible package's 100 collections. Workers are forked per task and never
    keep that, so every task running a collection module (nodeforge.gpu.managed_files, ...) paid it: 0.2 s a task
    instead of 0.05 s. The directories are listed once, in the strategy's process, before the workers fork. None when
    this Mitogen has no such step."""
    import ansible_mitogen.planner as planner

    if not hasattr(planner, "_load_collections"):
        return None
    dirs = collection_dirs()

    def _load_collections(invocation: Any) -> None:
        invocation._extra_sys_paths.update(dirs)

    planner._load_collections = _load_collections
    return dirs
