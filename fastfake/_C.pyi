"""Type stubs and documentation of the C++ extension ``fastfake._C`` (csrc/)."""
from typing import Any, Callable

def setup(
    fake_tensor_type: type,
    fake_mode_type: type,
    stock_torch_dispatch: Callable[..., Any],
    simple_call_counter: dict[str, int],
    crosscheck_hook: Callable[..., bool],
    fake_dict_template: dict[str, Any],
    meta_device: Any,
    compiler_dict: dict[str, Any],
    export_leak_check: Callable[[], bool],
    cache_learn_hook: Callable[..., Any],
    op_overload_type: type,
    pre_dispatch_infra_modes: list[Any],
    prim_device_op: Any,
    fake_device_attr: str,
) -> None:
    """Bind the torch objects the extension works with (called once by install()).
    ``fake_device_attr`` names the FakeTensor instance attribute holding its fake
    device on this release (``fastfake.common.compat.fake_device_attr()``)."""

def built_for() -> str:
    """The torch release (``major.minor.patch``) the extension was compiled against."""

def setup_symbolic(
    symnode_type: type,
    symint_type: type,
    sym_vid_hook: Callable[[Any], int],
    sym_valid_hook: Callable[[Any, Any], bool],
    sym_capture_hook: Callable[[Any, Any, Any], None],
    sym_vids: dict | None = None,
) -> None:
    """Bind what symbolic cache keys and entries need: ``SymNode`` (new output
    SymNodes are built as ``SymNode(expr, shape_env, pytype, hint, constant, fx_node,
    optimized_summation)``), ``torch.SymInt``, and the helpers of
    ``fastfake.cache.learn``: ``sym_vid(node)`` (interned value id, memoised on the
    node), ``still_valid(shape_env, validity)`` (an entry's symbols still have the
    replacements it was recorded under) and ``capture_begin(mode, func, args)``
    (collect the output stock synthesises for this call's new entry). ``sym_vids``
    is the hook's interning dict (``fastfake.cache.learn._VIDS``): a node whose value it
    already holds gets its id in C++, from the same five instance-dict fields, the
    hook only for new values (and wherever a field is missing or the class has a
    data descriptor of its name)."""


def set_symint_clone(clone: Any) -> None:
    """``SymNode.clone`` where it is proven to return its node
    (``fastfake.symbolic.symnode_int.clone_returning_node``), else None. While fastfake's C
    ``SymNode.maybe_as_int`` is in place, rebuilt outputs' symbolic sizes are then
    laid out without c10's per-value Python calls (each value stored as
    ``SymInt::clone()`` gives it: the int where ``maybe_as_int`` gives one, else the
    same node)."""

def set_symnode_template(init: Any) -> None:
    """``SymNode.__init__`` where it is one fastfake knows
    (``fastfake.common.compat.SYMNODE_INIT_SOURCES``), else None. While it is SymNode's
    constructor, a recipe's new SymNodes after the first are copies of the instance
    dict the constructor built for it, with their own ShapeEnv (not for a missing
    hint, nor under translation validation)."""

def set_symnode_kinds(is_int: Any, is_float: Any, is_bool: Any) -> None:
    """``SymNode.is_int`` / ``is_float`` / ``is_bool`` where each is the proven ``return
    self.pytype is <type>`` (``fastfake.common.compat.symnode_kind_methods``), else None:
    a recipe's new SymNodes then answer c10's kind questions without a Python call."""

def set_settings_fields(type: Any, names: list[str], eq: Any, hash: Any) -> None:
    """``ShapeEnvSettings``, its field names, ``__eq__`` and ``__hash__`` where
    ``fastfake.common.compat.settings_fields`` proves that those two read nothing but the
    fields (``None, (), None, None`` otherwise). Stock's cache key holds the
    settings object; the result cache's key then holds the bits of its fields when
    every one is a bool (equal bits: equal settings), else its hash. Checked on
    each key: the object's class is that class and its ``__eq__`` / ``__hash__``
    are still those functions."""


def _settings_key(settings: Any) -> int:
    """Test hook: the fields' bits the result cache's key holds for ``settings``
    (-1: it holds their hash)."""


def vids_cleared() -> None:
    """``fastfake.cache.learn.sym_vid`` emptied its interning dict: value ids C++ looked
    up before (the ones template SymNodes carry) are not reused."""


def set_template_vids(on: bool) -> bool:
    """Whether SymNodes made from a template (:func:`set_symnode_template`) carry
    the value id memo ``_fastfake_vid`` where their value is interned, so their
    first cache key does not look it up (default on); returns the previous
    setting."""


def _node_vid(node: Any) -> int:
    """Test hook: the value id the result cache keys a SymNode by (memo, the
    interning dict, else the hook); -1 where it has none."""


def _new_symnodes(fields: tuple, envs: list[Any]) -> list[Any]:
    """Testing: the SymNodes one recipe value ``(expr, pytype, hint, constant,
    fx_node, optimized_summation)`` gets in each ShapeEnv in turn, as rebuilt
    outputs get them (the first by the constructor, later ones from its dict where
    :func:`set_symnode_template` allows). A callable among ``envs`` is called at
    its turn (a step between two nodes of the same recipe value)."""

def _symbolic_layout(sizes: list[Any], strides: list[Any], offset: Any, direct: bool) -> tuple:
    """Testing: ``(sizes, strides, storage_offset, has_symbolic_sizes_strides)`` of a
    meta tensor given these values, laid out by fastfake (``direct``) or by c10's
    ``set_sizes_and_strides``."""

def setup_real_inputs(tensor_type: type, parameter_type: type, tls: Any, policy: Any) -> None:
    """Bind ``torch.Tensor``, ``torch.nn.Parameter``, stock's ``fake_tensor_tls``
    (``allow_non_fake_inputs_override``) and ``fastfake.convert.real_inputs.policy`` (per op:
    0 stock's, 1 convert only next to a fake argument, 2 convert)."""

def make_fast_dispatch() -> Any:
    """A C-level method object to install as ``FakeTensorMode.__torch_dispatch__``.

    Per call: pointwise overloads registered with :func:`register_elementwise` are
    served in C++ when the call's signature was admitted; other calls whose key has
    a result-cache entry (learned from stock's own cache entry after a miss; with
    symbolic shapes, per ShapeEnv) are rebuilt in C++; everything else is passed to
    the stock ``__torch_dispatch__`` unchanged.
    """

def fast_detach(fake_mode: Any, x: Any, include_real: bool = False) -> Any:
    """Stock's ``torch._subclasses.fake_impls.fast_detach`` (the snapshot
    ``proxy_tensor.snapshot_fake`` takes of every traced FakeTensor), built in C++
    for a plain FakeTensor of a plain ``FakeTensorMode``: the same two ``detach``
    dispatcher calls under the same thread-local state (so storage, SymInts,
    version counter, key set and inference state are stock's), then the object as
    ``FakeTensor.__new__`` finishes it. Every other call (other arguments, subclasses,
    ``include_real`` with a real tensor, own ``dispatch_keys``, kernel invocation,
    extra thread-local dispatch keys, a torch-function mode, export's leak tracker,
    non-strided layouts, unnormalised devices) is passed to stock's function, bound
    by :func:`setup_detach`. Counted as ``detach.fast`` / ``detach.stock.<why>``."""

def setup_convert(
    converter_type: type,
    meta_converter_type: type,
    describer_type: type,
    nested_int_registry: Any,
    cpu_device: Any,
    check_grad_dtype: bool,
) -> None:
    """Bind ``FakeTensorConverter``, ``meta_utils.MetaConverter``,
    ``meta_utils.MetaTensorDescriber``, the nested-int registry
    (``torch.nested._internal.nested_tensor._tensor_symint_registry``; conversions
    wait for stock while it holds anything), ``torch.device("cpu")``, and whether
    stock copies a ``grad_dtype`` differing from the dtype onto the fake
    (``fastfake.common.compat.tensors_have_grad_dtype()``; a requires-grad tensor is
    served only if its ``grad_dtype`` is its dtype)."""

def convert_real(converter: Any, fake_mode: Any, t: Any) -> Any:
    """``FakeTensorConverter.from_real_tensor(fake_mode, t)`` (no shape env, source,
    symbolic context or make_constant: the caller checks those) in C++
    (``csrc/convert/convert.cpp``): stock's memo first (``converter._get_memo(t)``, counted
    ``convert.memo``); then, for a plain real tensor -- a CPU ``torch.Tensor`` /
    ``nn.Parameter`` leaf with a plain dense TensorImpl, not a view, no ``.grad``,
    not an inference tensor, no conj / neg bit, storage offset 0, a nonempty
    storage no live fake of the converter holds and exactly as large as its sizes
    and strides need, not a 0-d integer / float64 tensor, ``grad_dtype`` equal to
    its dtype where tensors have one,
    none of ``_dynamo_dynamic_indices`` / ``_dynamo_hint_overrides`` /
    ``_is_buffer`` set -- stock's steps on stock's objects: ``meta_converter.hit``,
    the describer's storage id then tensor id, ``arg_cnt``, a meta tensor of the
    same sizes / strides / dtype wrapped as a FakeTensor on ``cpu``,
    ``requires_grad``, the storage memo, ``_is_param`` for parameters, the tensor
    memo (``convert.fast``). ``NotImplemented`` where stock must convert
    (``convert.stock.{disabled,arguments,tensor,state,shared_storage}``)."""

def set_convert(on: bool) -> bool:
    """Serve plain conversions in :func:`convert_real` (returns the previous
    setting; ``install()`` sets it with the patched ``from_real_tensor``)."""

def setup_portable(
    before: Callable[[Any, tuple, Any], Any],
    learn: Callable[[Any, Any, tuple, Any, Any, Any], Any],
    admit: Callable[[Any, Any, tuple, Any, Any], Any],
    commit: Callable[[Any, Any, Any, bool, bool], None],
    log_hit: Callable[[Any, Any, tuple, Any], None] | None,
    replay: Callable[[Any, Any], bool],
) -> None:
    """Bind ``fastfake.cache.portable``'s hooks: symbolic result-cache entries reused in
    another ShapeEnv (csrc/cache/portable.cpp). On a symbolic miss C++ asks
    ``before(mode, args, kwargs)`` for a snapshot of the ShapeEnv before stock runs (None: the call is never recorded)
    (and notes the derived values -- numel, contiguity -- each argument has
    memoised); if stock missed and no output holds an argument's memoised value,
    ``learn(mode, func, args, kwargs, out, snapshot)``
    returns ``(record, miss_description, fast_form)`` to record (the key with the ShapeEnv id
    replaced by 0, the hit and miss recipes; the record also describes the calls
    the kernel dispatched, if it can replay them). A first call in another
    ShapeEnv with that key, whose arguments have memoised the same derived values,
    is served (and what the kernel memoised on the arguments memoised on them) when ``admit(mode, func, args, kwargs, record)`` returns
    ``(validity, stock_keys)``; ``commit(mode, stock_keys, record, store, count)``
    then stores stock's entries into that ShapeEnv's cache (unless fastfake's
    crosscheck runs stock's own miss), adds the nested calls' counts to stock's
    (``count``: stock's counters count served calls) and the hit recipe becomes a
    local entry. While a miss is being recorded, a hit of the result cache inside
    its kernel calls ``log_hit(mode, func, args, kwargs)`` (stock's key for the call
    into the record's log), and the elementwise path and the negative entries'
    shortcuts leave the calls to stock. A record with a fast form
    (``fastfake.cache.portable._fast_form``) is admitted and committed in C++
    (csrc/cache/portable_fast.cpp) with the same decisions and effects; ``admit`` /
    ``commit`` then run only where the C++ admission leaves the call to them.
    Before a record admitted in C++ serves, ``replay(mode, record)`` makes the
    ShapeEnv evaluations stock's kernel made where it was learned
    (``fastfake.parity.evals``); False leaves the call to stock."""

def setup_portable_fast(refs: tuple, hints_attr: str) -> None:
    """Bind what the C++ admission of portable records needs: ``(_PySymInputStub,
    _DeconstructedSymType, _DispatchCacheKey, _DispatchCacheBypassEntry,
    _DeconstructedSymNode.from_node, fastfake.cache.facts.match, FakeTensorMode,
    fastfake.cache.portable._KEY_LOG, fastfake.cache.portable._OPEN)`` and the name of the
    ShapeEnv's backed hints (``fastfake.common.compat.backed_hints_attr``). The C++
    admission stays off unless the three key classes have the slots it writes."""

def set_portable_fast(on: bool) -> bool:
    """Admit and commit portable records in C++ (else every first call goes through
    ``fastfake.cache.portable.admit`` / ``commit``); returns the previous setting."""

def set_stub_extract(fn: Any) -> None:
    """``_DeconstructedSymNode.extract`` where ``fastfake.common.compat.stub_extract`` proves
    it is ``return SymNode(self._expr, shape_env, self.pytype, self._hint,
    self.constant, self.fx_node)`` (None otherwise). A served first call stores
    stock's keys in the new ShapeEnv's cache; a stub whose SymNode stock's kernel
    made gets a new SymNode of the recorded value. Where proven (and while the
    method and its module's ``SymNode`` are unchanged), that node is made in C++ as
    the constructor makes it -- from the constructor's own dict where
    :func:`set_symnode_template` proves it -- instead of calling ``extract``."""


def portable_fast_verifier(fn: Callable[[Any, Any, tuple, Any, Any, bool, tuple], None] | None) -> None:
    """Testing: ``fn(mode, func, args, kwargs, record, admitted, keys)`` on every
    decision the C++ admission makes, before anything is stored (``keys``: the
    nested calls' stock keys built for this ShapeEnv, then the call's own). If it
    raises, the error is printed and the call goes to stock."""

def portable_fast_counts() -> list[tuple[str, int]]:
    """``[(name, n)]``: first calls the C++ admission served (``served``,
    ``served_nested``), declined (``declined.shape_env``,
    ``declined.stock_has_entry``, ``declined.stock_lacks_entry``) and left to
    ``fastfake.cache.portable`` (``python``); ``stats()`` adds them to the
    ``cache.symbolic.portable.*`` counters of the same names
    (``admitted_python`` for the last)."""

def portable_fast_set_counts(counts: list[tuple[str, int]]) -> None:
    """Set the counts of :func:`portable_fast_counts` (missing names: 0)."""

def portable_memo_counts() -> tuple[int, int]:
    """``(refused, declined)``: calls not recorded because an output holds a
    derived value an argument had memoised (``view(-1)``: its input's numel), and first calls
    not served because their arguments had memoised other derived values than
    the recorded call's (``stats()``: ``cache.symbolic.portable.input_memo`` /
    ``.declined.input_memo``)."""

def portable_set_memo_counts(refused: int, declined: int) -> None:
    """Set the two counts of :func:`portable_memo_counts` (reset, and the
    self-test's save / restore)."""

def set_portable(on: bool) -> bool:
    """Serve and record symbolic entries across ShapeEnvs (returns the previous
    setting; the records are kept until :func:`cache_clear`)."""

def setup_stock_key(
    key_type: type, stub_type: type, backref_type: type, size_type: type, tracing_item: bool, on: bool
) -> None:
    """Bind stock's ``_DispatchCacheKey``, ``_PySymInputStub``, ``_InputBackref`` and
    ``torch.Size`` for :func:`stock_cache_key`, say whether the release's key holds
    the proxy-tracing flag after the ShapeEnv settings
    (``fastfake.common.compat.stock_key_head``), and turn it on or off
    (csrc/stock/key.cpp; ``fastfake.stock.key`` proves it against stock's own keys
    at install before turning it on)."""

def stock_key_on() -> bool:
    """Whether :func:`stock_cache_key` builds keys (else it returns None)."""

def stock_cache_key(mode: Any, state: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """Stock's ``mode._cache_key(state, func, args, kwargs)`` built in C++: the same
    ``_DispatchCacheKey`` over the same items, each SymInt converted by
    ``state.convert_sym_int``. With ``state`` None the SymInts are converted here
    (back-references and stubs as stock makes them, each new SymNode's ``expr``
    read as stock reads it, no symbols collected) and the result is ``(key,
    whether it holds a SymNode)``. None where the call is left to stock: a tensor
    that is not the mode's plain strided FakeTensor, a constant, a SymFloat /
    SymBool, a callable or other value of a type the layout does not cover, a
    4-d / 5-d static tensor (stock's channels-last test), a kernel invocation in
    progress; the caller then asks stock with a fresh state."""

def stock_key_counts() -> tuple[int, int]:
    """(keys built, calls left to stock); ``stats()``: ``stock_key.built`` /
    ``stock_key.fallback``."""

def stock_key_set_counts(built: int, fallback: int) -> None:
    """Set the counts of :func:`stock_key_counts`."""

def portable_size() -> int:
    """Number of recorded entries another ShapeEnv may reuse (bounded: 8,192, then
    emptied)."""

def portable_set_loader(fn: Callable[[], None] | None) -> None:
    """Called once, at the next symbolic miss (the store reads its records)."""

def portable_set_fast_for(fn: Callable[[Any, tuple], tuple | None] | None) -> None:
    """fn(record, keys): the C++ fast form of a record read from disk, after its first
    admission in Python and commit (None: not built)."""

def portable_disk_served() -> int:
    """First calls served from records the store read from disk."""

def portable_set_disk_served(n: int) -> None: ...

def portable_export() -> list[tuple]:
    """The portable records learned since the last export: (key, value-id positions,
    hit recipe, miss recipe, masks, seeds, record) (csrc/cache/entry_io.cpp)."""

def portable_import(items: list[tuple]) -> int:
    """Add (key, hit, miss, masks, seeds, record) records; how many were added."""

def setup_rerun(
    before: Callable[[Any, Any, tuple, Any], Any],
    learn: Callable[[Any, Any, tuple, Any, Any, Any], Any],
    admit: Callable[[Any, Any, bool], bool],
    ops: tuple[Any, ...],
    scalar_ops: tuple[Any, ...],
    symfloat_type: type,
) -> None:
    """Bind ``fastfake.cache.rerun``'s hooks and the ops it serves: symbolic calls stock
    never caches (csrc/cache/rerun.cpp). For a symbolic call of one of ``ops`` with a
    negative result-cache entry, or a call ``(FakeTensor, SymFloat)`` of one of
    ``scalar_ops`` (its key holds the SymFloat's value id and never enters the
    result cache; ``symfloat_type`` is ``torch.SymFloat``), C++ asks
    ``before(mode, func, args, kwargs)`` for a snapshot before stock reruns it,
    records which derived values each tensor argument had memoised, and afterwards
    ``learn(mode, func, args, kwargs, out, snapshot)`` returns ``(record,
    description)`` with ``record = ((symbols, scalar_symbols), signature, [stamp],
    nested_hits)``; the entry, keyed by the call's key without the ShapeEnv's id
    and by the inputs' memoised-value masks, also holds what the kernel memoised on
    the inputs. A repeat is served when ``admit(mode, record, same_env)`` is true
    (``same_env``: the ShapeEnv the record's stamp was last checked in; in another
    one only the scalar ops' records with ``nested_hits == 0`` are asked)."""

def set_rerun(on: bool) -> bool:
    """Serve and learn rerun entries (returns the previous setting; entries are kept
    until :func:`cache_clear`)."""

def set_rerun_scalar(on: bool) -> bool:
    """Serve and learn rerun entries of the scalar ops' calls with a SymFloat
    (returns the previous setting)."""

def rerun_size() -> int:
    """Number of rerun entries (bounded: 4,096, then emptied)."""

def rerun_counts() -> tuple[int, int, int, int]:
    """``(served, declined because the inputs' memoised values could not be read,
    served calls of the scalar ops, served calls of either kind in a ShapeEnv other
    than the one the record was learned in)``. Entries are kept per key and per memo state
    of the inputs (which derived values each input tensor had memoised)."""

def rerun_reset_counts() -> None: ...

def rerun_set_counts(served: int, declined_inputs: int, served_scalar: int, other_env: int) -> None:
    """Put saved counts back (the self-test restores the user's counters)."""

def setup_item_memo(op: Any, reason: str, eligible: Callable[[Any], bool]) -> None:
    """Bind ``.item()`` repeats (csrc/cache/item_memo.cpp, ``fastfake.cache.item_memo``): ``op``
    (``aten._local_scalar_dense.default``), ``reason`` (stock's bypass reason for it,
    ``"data dependent output"``) and ``eligible(mode)``. A negative static
    result-cache entry learned from stock's ``"stock: <reason>"`` description of
    ``op`` is a candidate; stock's answer from the argument's ``item_memo`` (that
    object, one bypass counted, no hit, miss or nested dispatch) proves it; a proven
    entry then answers a call whose only argument is the mode's own FakeTensor
    without a constant, whose ``item_memo`` descriptor returns a value and for which
    ``eligible(mode)`` is true, with that value, counting stock's bypass."""

def set_item_memo(on: bool) -> bool:
    """Serve and learn ``.item()`` repeats (returns the previous setting)."""

def item_memo_counts() -> dict[str, int]:
    """``served``, ``learned``, ``declined.no_memo``, ``declined.mode_state``,
    ``declined.arguments``."""

def item_memo_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (names missing from ``counts`` become 0)."""

# Python frame-stack chunks (csrc/runtime/frame_stack.cpp, fastfake/runtime/frame_stack.py)

def frame_stack_hook(on: bool) -> bool:
    """Put fastfake's arena allocator in front of the interpreter's (``on``) or the
    interpreter's back where fastfake's is still current (keeping nothing from then
    on, the kept blocks handed back); whether fastfake's is in place afterwards (it
    stays, passing through, behind a later one)."""

def frame_stack_keep(chunk: int, keep: int) -> None:
    """Keep up to ``keep`` (at most 8) freed blocks of exactly ``chunk`` bytes for
    the next requests of that size; ``keep=0`` passes everything through and hands
    the kept blocks back."""

def frame_stack_probe(on: bool) -> None:
    """Count the arena requests passed to the interpreter's allocator per size from now on (``on``), or stop; the counts
    start empty."""

def frame_stack_state() -> tuple[bool, int, int, int]:
    """(fastfake's allocator is the current one, chunk size, blocks it may keep,
    blocks it keeps now)."""

def frame_stack_sizes() -> dict[int, int]:
    """Arena requests passed to the interpreter's allocator per size while probing."""

def frame_stack_counts() -> dict[str, int]:
    """``reused``, ``kept``, ``released`` (freed past the bound), ``flushed``
    (kept blocks handed back)."""

def frame_stack_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (names missing from ``counts`` become 0)."""

# fastfake's learned records out of the cyclic collector (csrc/runtime/untrack.cpp,
# fastfake/runtime/untrack.py)

def untrack_set(on: bool, sympy_basic: type | None) -> None:
    """From now on, the tables untrack the inert containers they store (``on``, with
    ``sympy.Basic``, whose instances count as inert), or nothing (what was untracked
    stays so)."""

def untrack_inert(value: object) -> bool:
    """Untrack the exact tuples and frozensets in ``value`` (descending through
    tuples, frozensets, lists and dicts) whose items are all inert, as a table does
    when it stores ``value``; whether ``value`` itself is inert. Nothing while off."""

def untrack_counts() -> dict[str, int]:
    """``tuples``, ``dicts`` (templates), ``left`` (tuples and frozensets left
    tracked)."""

def untrack_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (names missing from ``counts`` become 0)."""

def setup_symnode_memo(
    symnode: type,
    method_to_operator: dict[str, Callable[..., Any]],
    sympy_parameters: Any,
    logging_internal: dict[str, Any],
    loggers: tuple[Any, ...],
) -> None:
    """Bind what the SymNode memo reads on every call (csrc/symbolic/symnode_memo.cpp,
    ``fastfake.symbolic.symnode_memo``): the SymNode class (operands must be exactly it),
    stock's ``METHOD_TO_OPERATOR`` (the hint is ``op(self.hint, other.hint)``),
    sympy's ``global_parameters`` (evaluate / distribute must be on), the
    ``torch._logging._internal`` module dict (``GET_DTRACE_STRUCTURED`` must be
    false) and the loggers that must not be at DEBUG (``sym_node``, shape events)."""

def symnode_memo_hook(method: str, stock: Callable[[Any, Any], Any]) -> Any:
    """A method object (``instancemethod``) to install as ``SymNode._<method>``: a
    repeat of ``stock(self, other)`` on the identical operand expressions (same
    pytypes and optimized-summation flags) gets the earlier result's expression,
    pytype and flag, its hint computed and its SymNode built by stock's own code;
    anything else calls ``stock``."""

def set_symnode_memo(on: bool) -> bool:
    """Serve and learn (returns the previous setting). Off keeps the entries: they
    are functions of their keys and never go stale; :func:`symnode_memo_clear`
    empties the memo."""

def set_symnode_memo_check(check: Callable[[str, Any, Any, Any, Any], bool] | None) -> None:
    """crosscheck: ``check(method, served, stock, self, other)`` after every served
    call (``fastfake.symbolic.symnode_memo.check`` raises :class:`fastfake.CrosscheckError`)."""

def symnode_memo_size() -> int:
    """Number of memo entries."""

def symnode_memo_set_max(n: int) -> int:
    """Set the bound (default 32,768 entries; the memo is emptied when a new entry
    would pass it); returns the previous one. Tests shrink it."""

def symnode_memo_clear() -> None: ...

def symnode_memo_counts() -> dict[str, int]:
    """``hit``, ``learned``, ``full`` and ``stock.<reason>`` (``proxy_tracing``,
    ``state``, ``hint``, ``type``, ``error``)."""

def symnode_memo_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_symnode_expr(symnode: type) -> None:
    """Bind the SymNode class :func:`symnode_expr_descriptor` serves exactly
    (csrc/symbolic/symnode_expr.cpp, fastfake/symbolic/symnode_expr.py)."""

def symnode_expr_descriptor(stock: property, rule: int) -> Any:
    """A descriptor for ``SymNode.expr`` that computes the stock property's body in C
    by ``rule`` (1: 2.13's ``is_number`` constant test, memoised on the expression's
    identity; 2: 2.14's ``is_Number``; 3: 2.15's ``is_Number`` or boolean atom; then
    the ``_expr_cache`` / ``_expr_ver`` replacement cache and
    ``shape_env.replace``). Class access returns ``stock``; setting, deleting and
    non-exact SymNodes go to it."""

def set_symnode_expr_check(check: Callable[[Any, Any], bool] | None) -> None:
    """crosscheck: ``check(node, served)`` after every served read (None: off)."""

def symnode_expr_memo_size() -> int:
    """Entries of the ``is_number`` memo (rule 1)."""

def symnode_expr_set_max(n: int) -> int:
    """Set the memo's bound (emptied when a new entry would pass it); returns the
    previous one (65536)."""

def symnode_expr_clear() -> None: ...

def symnode_expr_counts() -> dict[str, int]:
    """``served``, ``stock.type`` (not exactly a SymNode), ``learned``, ``full``."""

def symnode_expr_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_symnode_int(symnode: type, stock: Any) -> None:
    """Bind the SymNode class :func:`symnode_int_method` serves exactly and stock's
    ``maybe_as_int`` function, called for anything else (csrc/symbolic/symnode_int.cpp,
    fastfake/symbolic/symnode_int.py)."""

def symnode_int_method() -> Any:
    """What ``SymNode.maybe_as_int`` becomes: an instance method over a C function
    computing stock's body (``self.expr``, its ``is_number`` -- memoised on the
    expression's identity, the memo of :func:`symnode_expr_memo_size` --, then
    ``int(self.expr)`` or None). Class access gives the C function itself."""

def set_symnode_int_check(check: Any) -> None:
    """crosscheck: ``check(node, served)`` after every served call (None: off)."""

def symnode_int_counts() -> dict[str, int]:
    """``served`` (exact SymNodes) and ``stock.type`` (anything else, handed to
    stock's function)."""

def symnode_int_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_pytree(supported_nodes: dict, tuple_def: Any, list_def: Any, dict_def: Any, stock_map_only: Any,
                 stock_map: Any, stock_leaves: Any, stock_iter: Any) -> None:
    """Bind ``torch.utils._pytree.SUPPORTED_NODES``, the entries it holds for tuple, list
    and dict (a call while it holds others goes to stock) and stock's ``tree_map_only``,
    ``tree_map``, ``tree_leaves`` and ``tree_iter`` (csrc/tracing/pytree.cpp,
    fastfake/tracing/pytree.py)."""

def setup_pytree_fx(list_type: Any, dict_type: Any, list_def: Any, dict_def: Any) -> None:
    """Bind FX's ``immutable_list`` / ``immutable_dict`` and their registry entries:
    ``tree_leaves`` / ``tree_iter`` flatten them as lists and dicts while the registry
    holds those entries and the classes inherit iteration, ``values`` and ``keys``
    (``None, None, None, None``: they go to stock)."""

def pytree_functions() -> tuple[Any, Any, Any, Any]:
    """``(tree_map_only, tree_map, tree_leaves, tree_iter)`` as C functions: stock's result over
    plain trees (tuple / list / dict containers, leaves the registry cannot claim),
    stock's function for every other call."""

def set_pytree_check(check: Any) -> None:
    """crosscheck: ``check(tree, value, leaves_only)`` after every served call (None: off)."""

def pytree_counts() -> dict[str, int]:
    """``{map_only,map,leaves,iter}.served`` and ``stock.{arguments,predicate,function,node,
    registry,depth}`` (calls handed to stock's function, by reason)."""

def pytree_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_config_attr(module_type: type, entry_type: type, sentinel: Any, stock_getattr: Any, warn: Any,
                      alias_val: Any) -> None:
    """Bind torch's ``ConfigModule`` and ``_ConfigEntry`` classes, ``_UNSET_SENTINEL`` and
    the functions stock's read goes through (``ConfigModule.__getattr__``,
    ``_warn_if_deprecated``, ``_get_alias_val``): a module whose class no longer has
    them is read as stock reads it (csrc/tracing/config_attr.cpp,
    fastfake/tracing/config_attr.py)."""

def config_attr_descriptor() -> Any:
    """What ``ConfigModule.__getattribute__`` becomes: a method descriptor answering a
    plain entry of the module's ``_config`` as stock's ``__getattr__`` does, and
    everything else through ``module.__getattribute__`` (then stock's ``__getattr__``)."""

def config_attr_enable(on: bool) -> None:
    """Serve reads (True) or hand every one to ``module.__getattribute__`` (False)."""

def set_config_attr_check(check: Any) -> None:
    """crosscheck: ``check(module, name, served)`` after every served read (None: off)."""

def config_attr_counts() -> dict[str, int]:
    """``served`` and ``stock`` (reads handed to ``module.__getattribute__``)."""

def config_attr_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_functional_dispatch(mode_type: type, tensor_type: type, stock: Any, facts: Any, wrap_outputs: Any,
                              alias_fix: Any, registry: Any, dispatch_dict: dict, set_flag: Any,
                              functionalize_key: Any, cia_key: Any, types: tuple, extra_keys_raw: int) -> str:
    """Bind what the C ``FunctionalTensorMode.__torch_dispatch__`` uses (the mode and
    tensor classes, stock's method, the facts and output-wrapping helpers, stock's
    ``return_and_correct_aliasing``, the simple registry, ``torch.utils._python_dispatch``'s
    dict and its compile-internals flag setter, two dispatch keys, ``((Tensor,
    FakeTensor, FunctionalTensor), (SymInt, SymFloat, SymBool), OpOverload)``, the
    raw representation of ``FunctionalTensor._extra_dispatch_keys``); returns the C++ text of that
    key set (csrc/tracing/functional_dispatch.cpp, fastfake/tracing/functional_dispatch.py)."""

def setup_functional_dispatch_dynamo(get_callback: Any, eval_frame_dict: dict) -> None:
    """Bind ``torch._C._dynamo.eval_frame.get_eval_frame_callback`` and
    ``torch._dynamo.eval_frame``'s dict: a call is served only where stock's
    ``torch._disable_dynamo`` wrapper would change nothing (no callback, the default stance)."""

def setup_functional_dispatch_variant(preserve_keys: Any, alias_op: Any, detach_op: Any, effect_first: bool,
                                      side_effects: Any, layout_2_9: bool) -> None:
    """Bind what the release adds to the plain path (``compat.functional_dispatch_variant``):
    the callable run after ``aten.alias`` / ``aten.detach`` of one FunctionalTensor
    (2.14+: the input's FakeTensor ``dispatch_keys`` given to the outputs'; None where
    the release has no such step), whether ``has_effects`` reads the effect registry
    before ``has_aliasing`` (2.15), and 2.9's layout: its effect table
    ``effects.SIDE_EFFECTS`` (None where effects live in the simple registry), no
    ``torch._disable_dynamo`` wrapper around stock's method, no compile-internals flag
    set by the mode's enter / exit, bare assertions."""

def functional_dispatch_function() -> Any:
    """What ``FunctionalTensorMode.__torch_dispatch__`` becomes: a method descriptor
    serving the plain path and calling stock's method for everything else."""

def functional_dispatch_enable(on: bool) -> None:
    """Serve plain calls (True) or hand every call to stock's method (False)."""

def set_functional_dispatch_check(check: Any) -> None:
    """crosscheck: ``check(mode, func, args, kwargs)`` before every served call (None: off)."""

def functional_dispatch_clear() -> None:
    """Forget every op's facts (read again at the op's next call)."""

def functional_dispatch_counts() -> dict[str, int]:
    """``served`` and ``stock.<reason>``."""

def functional_dispatch_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_proxy_dispatch(refs: dict) -> None:
    """Bind what the C ``ProxyTorchDispatchMode.__torch_dispatch__`` uses, by name
    (the mode class, stock's method, the facts and SymInt-proxy helpers,
    ``proxy_tensor``'s dict and the names of it the path relies on, the call counter's
    dict and label, ``torch.fx.traceback``'s dict, ``ORIGINAL_ATEN``, ``prim.device``,
    the types it compares with, stock's ``Graph._target_to_str``, the
    compile-internals flag's setter, a dispatch key, the pre-dispatch proxy-mode
    getter; csrc/tracing/proxy_dispatch.h lists them). What a release adds
    (``compat.proxy_dispatch_variant``): ``module_names["_coor_enabled"]`` (2.14+:
    a call with a ``torch.device`` argument is stock's while it answers true) and
    ``refs["pyobj_dispatcher"]`` (2.14+: an op with a ``_pyobj_dispatcher`` is called
    through its ``__call__``); ``refs["layout_2_9"]`` (2.9: every op offered to
    ``decompose``, the module's ``CURRENT_DECOMPOSITION_TABLE``, ``ORIGINAL_ATEN`` a
    module global, which ``refs["original_aten"]`` is then None for, no
    compile-internals flag: ``set_flag`` None)."""

def proxy_dispatch_function() -> Any:
    """What ``ProxyTorchDispatchMode.__torch_dispatch__`` becomes: a method descriptor
    serving the plain path and calling stock's method for everything else."""

def proxy_dispatch_enable(on: bool) -> None:
    """Serve plain calls (True) or hand every call to stock's method (False)."""

def set_proxy_dispatch_check(check: Any) -> None:
    """crosscheck: ``check(mode, func, args, kwargs)`` before every served call (None: off)."""

def proxy_dispatch_clear() -> None:
    """Forget every op's facts (read again at the op's next call)."""

def proxy_dispatch_counts() -> dict[str, int]:
    """``served``, ``served.device``, ``stock.<reason>``, ``tracked_by_stock``."""

def proxy_dispatch_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_sym_register(stock: Any, module_dict: dict, module_names: dict, fx_dict: dict, sym_types: tuple,
                       symnode_dict_type: type, thunk_type: type, proxy_type: type, set_proxy_slot: Any,
                       computed_thunk: Any, opaque_types: Any, opaque_keys: Any) -> None:
    """Bind stock's ``proxy_tensor._sym_register`` (every call not on the plain path),
    ``proxy_tensor``'s dict and the (name, value) pairs of it the plain path stands for
    (checked per call), ``torch.fx``'s dict (``fx.Proxy``), the sym types,
    ``_SymNodeDict``, ``Thunk``, ``fx.Proxy``, stock's ``set_proxy_slot``, a function
    making ``Thunk(lambda: r)``, the opaque-type registry's dict (None: none) and its
    keys for SymInt, SymFloat, SymBool and ``object``."""

def setup_sym_register_slot(symbol_type: Any, tracker_value_type: Any, logger_type: Any) -> None:
    """Binds what set_proxy_slot's SymInt branch in C reads (csrc/tracing/sym_register.cpp)."""
def setup_fx_node(objects: dict) -> bool:
    """Binds stock's PythonKeyTracer.create_node and what its plain path reads and calls (csrc/tracing/fx_node.cpp)."""
def fx_node_method() -> Any:
    """What PythonKeyTracer.create_node becomes (csrc/tracing/fx_node.cpp)."""
def fx_node_enable(on: bool) -> None: ...
def set_fx_node_check(check: Any) -> None: ...
def fx_node_clear() -> None: ...
def fx_node_counts() -> dict[str, int]: ...
def fx_node_set_counts(counts: dict[str, int]) -> None: ...
def setup_sym_dispatch(objects: dict) -> bool:
    """Binds stock's handle_sym_dispatch and what its plain path reads and calls (csrc/tracing/sym_dispatch.cpp)."""
def sym_dispatch_function() -> Any:
    """What proxy_tensor.handle_sym_dispatch becomes (csrc/tracing/sym_dispatch.cpp)."""
def sym_dispatch_enable(on: bool) -> None: ...
def set_sym_dispatch_check(check: Any) -> None: ...
def sym_dispatch_counts() -> dict[str, int]: ...
def sym_dispatch_set_counts(counts: dict[str, int]) -> None: ...
def setup_dce_pred(objects: dict) -> bool:
    """Binds what make_fx's dead-code predicate in C reads and calls (csrc/tracing/dce_pred.cpp)."""
def dce_pred_new(stock: Any) -> Any:
    """A predicate standing for one impure_pred during one elimination (csrc/tracing/dce_pred.cpp)."""
def dce_pred_enable(on: bool) -> None: ...
def dce_pred_counts() -> dict[str, int]: ...
def dce_pred_set_counts(counts: dict[str, int]) -> None: ...
def sym_register_function() -> Any:
    """What ``proxy_tensor._sym_register`` becomes (csrc/tracing/sym_register.cpp)."""

def sym_register_enable(on: bool) -> None:
    """Serve plain calls (True) or hand every call to stock's function (False)."""

def set_sym_register_check(check: Any) -> None:
    """crosscheck: ``check(tracer, func, args, out, node)`` after every served call (None: off)."""

def sym_register_counts() -> dict[str, int]:
    """``served``, ``not_sym``, ``stock.<reason>``."""

def sym_register_set_counts(counts: dict[str, int]) -> None:
    """Put saved counts back (missing names are zero)."""

def setup_detach(stock: Any) -> None:
    """Bind stock's ``fast_detach`` (called for every case :func:`fast_detach` does
    not serve)."""

def make_device_descriptor(stock: property) -> Any:
    """A C-level data descriptor to install as ``FakeTensor.device``: returns
    ``meta`` inside kernel invocation, else the tensor's fake device; delegates to
    ``stock`` for anything unusual, and for setting/deleting."""

def set_config(
    *,
    elementwise: bool,
    cache: bool,
    crosscheck: bool,
    max_signatures_per_op: int,
    cache_max_entries: int,
    cache_symbolic: bool = True,
    real_inputs: bool = True,
    cache_max_bytes: int = 64 << 20,
) -> None: ...
def get_config() -> tuple[bool, bool, int, bool, int, bool]:
    """(elementwise, crosscheck, max_signatures_per_op, cache, cache_max_entries,
    cache_symbolic)"""

def cache_clear() -> None:
    """Drop every result-cache entry and every portable record."""

def cache_bytes() -> int:
    """Bytes the result-cache entries hold, as the byte bound counts them (estimated
    per entry when it is stored: keys, index, output specs, symbolic recipes and the
    Python tuples of new SymNode values)."""

def cache_size() -> int:
    """Number of result-cache entries."""

# ---- stock's cache statistics for served calls (csrc/stock/counts.cpp) ----

def take_stock_counts() -> tuple[int, int, int, int, int]:
    """(hits, misses, non-fake-tensor bypasses, unsafe-view bypasses,
    symbolic-shape bypasses) stock's dispatch cache would have counted for the calls
    served since the last take; zeroes them (fastfake/stock/cache.py adds them to
    ``FakeTensorMode.cache_hits`` / ``cache_misses`` /
    ``cache_bypasses["non-fake tensor"]`` / ``cache_bypasses["unsafe view"]`` /
    ``cache_bypasses["symbolic shape"]``; a served call with a SymFloat argument is
    one "symbolic shape" bypass). A served ``_unsafe_view`` (an entry learned
    from stock's uncached output where stock bypasses its cache for the op) counts
    as stock counts that call: one "unsafe view" bypass and one hit (the op its
    kernel dispatches)."""

def stock_cache_extra_entries() -> int:
    """Entries stock's cache would hold for elementwise calls served here."""

def stock_cache_cleared() -> None:
    """Stock's cache was cleared: forget the calls it would hold, drop pending counts."""

def set_stock_counting(on: bool) -> bool:
    """Count served calls for stock's statistics (off during the self-test);
    returns the previous setting."""

def synth_recipe(synth: Any, fresh: bool) -> tuple[Any, tuple[tuple[int, Any], ...], int] | None:
    """What a symbolic FakeTensor stock synthesised for a new cache entry carries
    beyond its sizes / strides / offset: ``(storage_nbytes or None, ((derived kind,
    value), ...), version)`` with each value an int or a SymNode value tuple
    ``(expr, pytype, hint, constant, fx_node, optimized_summation)``; ``None`` when
    it cannot be described."""

def synth_build(
    mode: Any, dtype: Any, device: Any, sizes: tuple[Any, ...], strides: tuple[Any, ...],
    offset: Any, base: Any, recipe: tuple[Any, tuple[tuple[int, Any], ...], int],
) -> Any:
    """Build that FakeTensor from sizes / strides / offset (ints or SymInts, used as
    they are) and a recipe: fresh storage of the recorded size, or ``base``'s
    storage for a view; derived values seeded; no SymNode arithmetic. ``None`` when
    those values build a tensor without symbolic sizes while the recipe has derived
    values (the caller builds it as stock does)."""

def _inject_fault(n: int, kind: str = "dtype") -> None:
    """Testing only: ``kind="dtype"``: the next ``n`` fast elementwise results get a
    wrong dtype; ``kind="device"``: the next ``n`` FakeTensors fastfake serves store
    a wrong device (meta) in their device attribute (what a wrong internal on
    another release gives); ``kind="convert"``: the next ``n`` conversions by
    :func:`convert_real` leave ``requires_grad`` unset; ``kind="portable"``: the
    next ``n`` calls served from another ShapeEnv's entry are rebuilt from stock's
    hit recipe instead of its miss recipe; ``kind="portable_admit"``: the next ``n``
    admissions made in C++ skip the signature comparison; ``kind="portable_commit"``:
    the next ``n`` commits made in C++ skip the nested calls' entries and counts;
    ``kind="stub_node"``: the next ``n`` SymNodes made in C++ for stock's stored keys
    (:func:`set_stub_extract`) get the other optimized-summation flag; ``kind="rerun"``: the next ``n`` served
    repeats of ``_unsafe_view`` leave their inputs without the values the kernel
    memoised on them; ``kind="rerun_scalar"``: the same for served repeats of
    pointwise calls with a SymFloat; ``kind="symnode"``: the next ``n`` SymNodes served from
    the SymNode memo get the other optimized-summation flag; ``kind="symnode_expr"``:
    the next ``n`` ``SymNode.expr`` reads after a replacement answer the unreplaced
    ``_expr``; ``kind="symnode_int"``: the next ``n`` ``SymNode.maybe_as_int`` calls
    whose answer is an int answer None; ``kind="item_memo"``: the next ``n`` served
    ``.item()`` repeats read the raw ``_item_memo`` attribute, skipping the memo
    descriptor's staleness check; ``kind="pytree"``: the next ``n`` served pytree maps
    rebuild tuples as lists (and lists of leaves come reversed); ``kind="config_attr"``:
    the next ``n`` served configuration reads of a bool answer its negation;
    ``kind="functional_dispatch"``: the next ``n`` calls the C functional mode serves
    return the inner (unwrapped) outputs; ``kind="proxy_dispatch"``: the next ``n``
    calls the C proxy mode serves leave their output untracked (no proxy slot, no
    ``val`` / ``tensor_meta``); ``kind="proxy_dispatch_syms"``: the next ``n``
    outputs with symbolic sizes it tracks leave their SymInts without proxy slots;
    ``kind="sym_register"``: the next ``n`` SymNode operations the C
    ``_sym_register`` serves leave their result without a proxy slot."""

def _faults_requested() -> int:
    """Testing only: how many non-zero faults :func:`_inject_fault` was asked for in
    this process. A self-test result kept on disk is not used once one was
    (``fastfake/core/selftest_store.py``): the self-test must judge the fault."""


def register_elementwise(
    name: str, inplace: bool, args: list[tuple[str, int, bool, bool, Any]]
) -> None:
    """Register a pointwise overload by its name (``str(op)``, e.g.
    ``"aten.add.Tensor"``). ``args`` are the schema arguments in order as
    ``(name, kind, kwarg_only, has_default, default)`` with ``kind`` an ArgKind code
    (see fastfake.elementwise.registry.ARG_KINDS). The registration is bound to the overload
    object the first time one with that name is dispatched; an overload object
    whose name is not registered is remembered as such (a bounded set of owned
    references, emptied by any registration or :func:`clear_elementwise`). A
    registration of a name already registered replaces it (its learned signatures
    are forgotten)."""

def clear_elementwise() -> None:
    """Forget all registrations and learned signatures."""

def is_elementwise_registered(op: Any) -> bool:
    """Whether ``op`` takes the elementwise path (binds a pending registration)."""

def file_listing(root: str, suffixes: list[str], skip_dirs: list[str]) -> bytes:
    """``b"path\\0size\\0mtime_ns\\n"`` for every file under ``root`` whose name ends
    with one of ``suffixes`` (stat follows a symbolic link); directories depth first,
    each one's entries in name order, its files before its subdirectories;
    subdirectories named in ``skip_dirs`` and symbolic links to directories are not
    entered; what cannot be read gives ``b"!path:OSError\\n"``. The self-test
    store's key is made of it (``fastfake/core/selftest_store.py``); the GIL is released."""

def module_code_stream(module: Any, volatile: frozenset[str]) -> bytes:
    """The bytes the self-test store's key hashes for ``module``'s code: a record per
    function, method, property part and class it defines or holds and per module-
    and class-level scalar (``volatile`` names scalars left out: ``"attr"`` or
    ``"Class.attr"``), in sorted name order, each variable part tagged and
    length-prefixed; a function's record holds its whole code object (bytecode, file
    name, first line, names, variable names, constants, nested code). Raises what a
    getattr of a held object raises (but AttributeError), sorted()'s TypeError for
    keys it cannot order. tests/test_selftest_store.py writes the same in Python."""

def stable_stream(v: Any) -> bytes:
    """A value's bytes, the same in every process (no addresses, no hash-seeded
    orders): None, bools, strs and bytes themselves, other numbers by repr, code
    objects as in :func:`module_code_stream`, tuples and lists item by item, sets with
    their items sorted, anything else (or deeper than four levels) by its type's name.
    Each value's stream delimits itself."""

def last_code_line(code: Any) -> int:
    """The last source line any instruction of ``code`` (or of the code objects among
    its constants) spans: the largest end line of ``co_positions()``, at least
    ``co_firstlineno`` (``fastfake/common/compat.py``'s code spans)."""

def stock_calls() -> dict[str, tuple[int, int]]:
    """Calls handed to stock's ``__torch_dispatch__`` (every ``dispatch.stock``), per
    overload name (``str(op)``): ``(outermost, nested)``, nested meaning that a stock
    call of the same thread was in progress (stock's own kernel dispatched it). At
    most a bound of names (4,096); later new names count under ``"other"``
    (``csrc/stock/calls.cpp``)."""

def stock_calls_set(calls: dict[str, tuple[int, int]]) -> None:
    """Replace those counts (``{}`` zeroes them; the self-test saves and restores)."""

def _set_stock_calls_max(n: int) -> int:
    """Testing: set the bound on distinct names; returns the previous one."""

def _elementwise_sizes() -> dict[str, int]:
    """Testing: ``bound`` (overload objects with their registration), ``pending``
    (registered names not dispatched yet), ``not_pointwise`` and
    ``not_pointwise_max`` (the remembered non-registered objects and their bound)."""

def _set_not_pointwise_max(n: int) -> int:
    """Testing: set that bound (applies to later insertions); returns the previous."""
def elementwise_report() -> dict[str, dict[str, Any]]:
    """Per overload: admitted / rejected signature counts, hits, inplace, last_mismatch."""

def counters() -> list[tuple[str, int]]:
    """(dotted name, value) for every counter."""

def reset_counters() -> None: ...
def set_counters(values: list[int]) -> None:
    """Set every counter; one value per counter, in :func:`counters` order (the
    install-time self-test puts the counters back this way)."""

def forget_signatures() -> None:
    """Forget every learned elementwise signature (the registrations stay)."""

def compare(a: Any, b: Any) -> str:
    """'' if two results are identical (type, layout, dtype, sizes, strides, storage
    offset, storage nbytes, fake device, fake mode, requires_grad, conj/neg,
    inference, dispatch keys), else the first differing field."""
