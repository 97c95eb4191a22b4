"""Layer types of ``__init__`` bindings however the code builds them (docs/ENGINE.md "Layer types").

``self.conv = nn.Conv2d(...)`` names its type; model code often does not:

* ``self.bn = norm_layer(planes)`` where ``norm_layer`` is a constructor parameter defaulting to a type, or set by
  ``if norm_layer is None: norm_layer = nn.BatchNorm2d`` / ``norm_layer or nn.BatchNorm2d``, or a
  ``functools.partial(nn.BatchNorm2d, eps=...)``: the caller may pass anything, so the type is only *possible*;
* ``self.conv = conv3x3(a, b)`` where a module-level function returns ``nn.Conv2d(...)``: the type is certain and
  the arguments are the returned call's, the function's parameters replaced by what the call passes;
* ``self.conv = create_conv2d(...)`` / ``norm_act_layer = get_norm_act_layer(norm_layer)`` where the function is
  defined in another file or package (timm): read by :mod:`.factory_types`, certain when every path returns one
  type, possible otherwise; its arguments are not known;
* ``nn.Sequential(*layers)`` over a list built by ``layers.append(...)``, ``layers += [...]``, ``extend``, from an
  ``OrderedDict``, and a subclass of ``nn.Sequential`` calling ``super().__init__(*layers)`` (torchvision's
  ``ConvNormActivation``).

So a binding's type is a :class:`LayerType`: one certain type, a set of possible types (the names the code offers,
and maybe others), or unknown. A rule rewrites an uncertain site only when its runtime kernel checks the modules it
is given and computes the original expression otherwise (rule header ``uncertain guarded``, docs/DESIGN.md §4).

:class:`InitReader` interprets one function body in order, tracking what local names hold (a layer constructor,
a list of layers, a layer), joining the arms of ``if``/``for``/``try``. Anything it does not model makes the names
involved unknown; a list passed to anything but ``nn.Sequential``/``append``/``extend``/``+=`` loses its elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

import libcst as cst

from . import cstwalk
from .factory_types import FactoryTypes, Function, Types, Value
from .qualnames import ImportTable, canonical_torch_name, dotted_name, qualname_matches
from .structure import CERTAIN, OPAQUE, OPAQUE_TYPE, UNKNOWN, UNKNOWN_TYPE, LayerBinding, LayerType, certain

# The name of an nn.Sequential built where no attribute holds it (in a comprehension, a call's argument): its elements
# are "Sequential.<index>".
ANONYMOUS_CONTAINER = "Sequential"


@dataclass(frozen=True)
class Constructor:
    """A local name (or expression) that builds a layer when called: a type, a partial of one, a factory."""

    type: LayerType
    preset: tuple[cst.Arg, ...] = ()  # functools.partial arguments, which come before the call's
    direct: bool = True  # the callee spells the type itself, so an __init__ edit may rewrite the call
    args_known: bool = True

    def join(self, other: "Constructor") -> "Constructor":
        same_preset = _args_text(self.preset) == _args_text(other.preset)
        return Constructor(
            self.type.join(other.type),
            self.preset if same_preset else (),
            False,
            self.args_known and other.args_known and same_preset,
        )


# Whatever a caller passes: it hides no argument of the candidates it is joined with.
UNKNOWN_CONSTRUCTOR = Constructor(UNKNOWN_TYPE, (), False, True)

# nn.Module methods that move or cast the module's tensors in place and return it. Not `train`/`eval`/
# `requires_grad_`: a fused replacement (ADP005's) also does the work of a layer the conversion did not touch.
_RETURNS_THE_MODULE = frozenset({"to", "float", "double", "half", "bfloat16", "cuda", "cpu"})


@dataclass(eq=False)
class LayerList:
    """A local list of layers being built: elements in order (barriers where arms of an ``if`` meet)."""

    elements: list[LayerBinding] = field(default_factory=list)
    tainted: bool = False  # passed somewhere that may change it: its elements are unknown


Held = Union[Constructor, LayerList, LayerBinding, None]  # None: nothing known


_EMPTY = cst.Module([])


def _args_text(args: tuple[cst.Arg, ...]) -> tuple[str, ...]:
    return tuple(_EMPTY.code_for_node(a) for a in args)


def _is_super_init(call: cst.Call) -> bool:
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value == "__init__"
        and isinstance(func.value, cst.Call)
        and isinstance(func.value.func, cst.Name)
        and func.value.func.value == "super"
    )


def _self_attr(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def converted_construction(value: cst.BaseExpression) -> Optional[cst.Call]:
    """The construction in ``Norm(d).to(dtype=torch.float32)`` (DeepSeek-V4's norms), ``Layer(...).half()``, ...:
    the layer bound is the one the inner call builds, and an edit of that call keeps the conversion."""
    inner: Optional[cst.Call] = None
    while (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in _RETURNS_THE_MODULE
        and isinstance(value.func.value, cst.Call)
    ):
        value = inner = value.func.value
    return inner


def factory_return(fn: cst.FunctionDef) -> Optional[cst.Call]:
    """The call a module-level function returns when its body is only that (docstring aside)."""
    body = list(fn.body.body) if isinstance(fn.body, cst.IndentedBlock) else []
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr):
        if isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            body = body[1:]
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return None
    ret = body[0].body[0]
    if isinstance(ret, cst.Return) and isinstance(ret.value, cst.Call) and not fn.decorators:
        return ret.value
    return None


def _bind_call(fn: cst.FunctionDef, call_args: tuple[cst.Arg, ...]) -> Optional[dict[str, cst.BaseExpression]]:
    """Parameter name -> the expression the call passes (or the default); None when that is not plain."""
    params = fn.params
    if params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or params.star_kwarg is not None:
        return None
    positional = [*params.posonly_params, *params.params]
    named = {p.name.value: p for p in (*positional, *params.kwonly_params)}
    bound: dict[str, cst.BaseExpression] = {}
    for i, arg in enumerate(call_args):
        if arg.star:
            return None
        if arg.keyword is None:
            if i >= len(positional):
                return None
            bound[positional[i].name.value] = arg.value
        elif arg.keyword.value in named:
            bound[arg.keyword.value] = arg.value
        else:
            return None
    for name, param in named.items():
        if name not in bound:
            if param.default is None:
                return None
            bound[name] = param.default
    return bound


class InitReader:
    """Reads the bindings and ``nn.Sequential`` constructions of one class's functions (or of module functions)."""

    def __init__(
        self,
        table: ImportTable,
        functions: dict[str, cst.FunctionDef],
        sequential_base: Optional[cst.BaseExpression] = None,
        sequential_calls: bool = True,
        factories: Optional[FactoryTypes] = None,
    ) -> None:
        self.table = table
        self.functions = functions  # module-level functions by name: factories
        self.factories = factories  # functions of other files (factory_types.py); None: not followed
        self.sequential_base = sequential_base  # the `nn.Sequential` base of a Sequential subclass without forward
        self.sequential_calls = sequential_calls  # whether the code calls nn.Sequential at all (else skip looking)
        self.bindings: dict[str, list[LayerBinding]] = {}
        self.containers: list[LayerBinding] = []  # every nn.Sequential built, with its elements
        self.function = "__init__"
        self._seen: set[int] = set()  # ids of Sequential calls already read as containers
        # `self._norm_layer = norm_layer` in __init__: what `self._norm_layer(...)` builds in `_make_layer`.
        self._attr_constructors: dict[str, Optional[Constructor]] = {}
        self._line: Optional[cst.SimpleStatementLine] = None  # the statement being read: where containers report
        self._bind_self = True
        # methods only `__init__` calls (`self._init_layers()`, mmdet's heads): read where it calls them, as part of it
        self.init_helpers: dict[str, cst.FunctionDef] = {}
        self._reading: set[str] = set()  # the helpers being read (one calling itself is not read again)

    # ------------------------------------------------------------------ entry points
    def read_init(self, fn: cst.FunctionDef) -> None:
        self.function, self._bind_self = "__init__", True
        self._block(fn.body, self._params(fn, method=True), False)

    def read_other(self, fn: cst.FunctionDef, qualified: str, method: bool) -> None:
        """Only the nn.Sequential constructions of a function other than __init__ (`_make_layer`, a module-level
        `downsample_conv`): `self.x = ...` there is no __init__ binding."""
        self.function, self._bind_self = qualified, False
        self._block(fn.body, self._params(fn, method=method), False)

    # ------------------------------------------------------------------ constructors
    def _params(self, fn: cst.FunctionDef, method: bool) -> dict[str, Held]:
        env: dict[str, Held] = {}
        params = [*fn.params.posonly_params, *fn.params.params, *fn.params.kwonly_params]
        if method and params:
            params = params[1:]
        for param in params:
            default = self.constructor(param.default, {}) if param.default is not None else None
            # The caller may pass another type: a default names only a possibility.
            env[param.name.value] = default.join(UNKNOWN_CONSTRUCTOR) if default is not None else UNKNOWN_CONSTRUCTOR
        return env

    def constructor(self, expr: cst.BaseExpression, env: dict[str, Held]) -> Optional[Constructor]:
        """What calling `expr` builds, when it is a layer constructor as far as the code shows."""
        if isinstance(expr, cst.Name) and expr.value in env:
            held = env[expr.value]
            return held if isinstance(held, Constructor) else None
        attr = _self_attr(expr)
        if attr is not None:
            return self._attr_constructors.get(attr)
        if isinstance(expr, cst.Name) and expr.value == "None":
            return UNKNOWN_CONSTRUCTOR  # `norm_layer=None` then `if norm_layer is None: norm_layer = ...`
        if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or):
            left, right = self.constructor(expr.left, env), self.constructor(expr.right, env)
            return left.join(right) if left is not None and right is not None else None
        if isinstance(expr, cst.IfExp):
            body, orelse = self.constructor(expr.body, env), self.constructor(expr.orelse, env)
            return body.join(orelse) if body is not None and orelse is not None else None
        if isinstance(expr, cst.Call):
            func = self.table.resolve(expr.func)
            if func is not None and canonical_torch_name(func) == "functools.partial" and expr.args:
                wrapped = expr.args[0].value
                inner = self.constructor(wrapped, env)
                if inner is None or any(a.star for a in expr.args[1:]):
                    return None
                # A partial of a factory passes its arguments to the factory, not to the layer.
                known = inner.args_known and not (isinstance(wrapped, cst.Name) and wrapped.value in self.functions)
                return Constructor(inner.type, inner.preset + tuple(expr.args[1:]), False, known)
            external = self._external_call(expr, env)
            if external is not None and external.builds.names:
                return Constructor(external.builds.layer_type(), (), False, False)
            return None
        if isinstance(expr, (cst.Name, cst.Attribute)):
            if (dotted_name(expr) or "").split(".")[0] in env:
                return None  # `def __init__(self, nn)`: `nn.Linear` is whatever the caller passes, not torch's
            if isinstance(expr, cst.Name) and expr.value in self.functions:
                returned = factory_return(self.functions[expr.value])
                if returned is not None:
                    inner = self.constructor(returned.func, {})
                    if inner is not None and inner.type.certainty == CERTAIN:
                        return Constructor(inner.type, (), False, True)
                return None
            function = self._external_function(expr, env)
            if function is not None:
                assert self.factories is not None
                builds = self.factories.call(function, None).layer
                if builds.names:
                    return Constructor(builds.layer_type(), (), False, False)
            # A function naming no layer type keeps its own name as the type (a rule may name the factory:
            # ADP006's `*.get_activation`).
            qualname = self.table.resolve(expr)
            if qualname is not None:
                return Constructor(certain(canonical_torch_name(qualname)))
        return None

    def _external_function(self, expr: cst.BaseExpression, env: dict[str, Held]) -> Optional[Function]:
        """The function of another file an imported name (`create_conv2d`, `layers.make_norm`) names."""
        if self.factories is None:
            return None
        name = dotted_name(expr)
        head = name.split(".")[0] if name is not None else None
        if head is None or head not in self.table.names or head in env:
            return None
        qualname = self.table.resolve(expr)
        return self.factories.function(qualname) if qualname is not None else None

    def _external_call(self, call: cst.Call, env: dict[str, Held]) -> Optional[Value]:
        """What a call of a function of another file returns, given what its arguments build."""
        function = self._external_function(call.func, env)
        if function is None:
            return None
        assert self.factories is not None
        if any(arg.star for arg in call.args):
            return self.factories.call(function, None)
        args = []
        for arg in call.args:
            made = self.constructor(arg.value, env)
            args.append((arg.keyword.value if arg.keyword is not None else None,
                         Types.of(made.type) if made is not None else Types(other=True)))
        return self.factories.call(function, args)

    # ------------------------------------------------------------------ layers
    def layer(self, attr: str, value: cst.BaseExpression, line: Optional[cst.SimpleStatementLine],
              conditional: bool, env: dict[str, Held]) -> LayerBinding:
        """The binding of `value` (a layer built here, or a name holding one)."""
        if isinstance(value, cst.Name) and isinstance(env.get(value.value), LayerBinding):
            held = env[value.value]
            assert isinstance(held, LayerBinding)
            return LayerBinding(
                attr, held.qualname, held.args, held.subscript, held.value, line, conditional,
                elements=held.elements, layer_type=held.layer_type, direct=False, args_known=held.args_known,
            )
        if isinstance(value, cst.Subscript):
            qualname = self.table.resolve(value.value)
            qualname = canonical_torch_name(qualname) if qualname is not None else None
            args = tuple(cst.Arg(value=el.slice.value) for el in value.slice if isinstance(el.slice, cst.Index))
            layer_type = certain(qualname) if qualname is not None else UNKNOWN_TYPE
            return LayerBinding(attr, qualname, args, True, value, line, conditional, layer_type=layer_type)
        if isinstance(value, cst.IfExp):
            # `nn.Dropout(p) if p > 0 else nn.Identity()` (DETR-style code): either arm's layer, so each is possible
            # (one type where both are; the arguments are the arm's that runs: not known here).
            arms = [self.layer(attr, arm, line, conditional, env) for arm in (value.body, value.orelse)]
            layer_type = arms[0].layer_type.join(arms[1].layer_type)
            return LayerBinding(
                attr, layer_type.certain, (), False, value, line, conditional, layer_type=layer_type, direct=False,
                args_known=False,
            )
        if not isinstance(value, cst.Call):
            return LayerBinding(attr, None, (), False, value, line, conditional, layer_type=UNKNOWN_TYPE, args_known=False)
        construction = converted_construction(value)
        if construction is not None:
            return self.layer(attr, construction, line, conditional, env)
        external = self._external_call(value, env)
        if external is not None and external.layer.names:
            made = Constructor(external.layer.layer_type(), (), False, False)
        else:
            made = self.constructor(value.func, env) or UNKNOWN_CONSTRUCTOR
        args, known = tuple(value.args), made.args_known
        if isinstance(value.func, cst.Name) and value.func.value in self.functions and value.func.value not in env:
            args, known = self._factory_args(self.functions[value.func.value], args)
        elif made.preset:
            args = made.preset + args
        binding = LayerBinding(
            attr, made.type.certain, args, False, value, line, conditional,
            layer_type=made.type, direct=made.direct, args_known=known,
        )
        if made.type.certain is not None and qualname_matches("torch.nn.Sequential", made.type.certain):
            self._container(binding, value, attr, conditional, env)
        return binding

    def _factory_args(self, fn: cst.FunctionDef, call_args: tuple[cst.Arg, ...]) -> tuple[tuple[cst.Arg, ...], bool]:
        """The factory's returned call's arguments, each parameter it passes on replaced by the caller's argument;
        not known when an argument computes with a parameter or the call is not plain."""
        returned = factory_return(fn)
        bound = _bind_call(fn, call_args)
        if returned is None or bound is None:
            return (), False
        out: list[cst.Arg] = []
        for arg in returned.args:
            if arg.star:
                return (), False
            if isinstance(arg.value, cst.Name) and arg.value.value in bound:
                out.append(arg.with_changes(value=bound[arg.value.value]))
            elif any(isinstance(n, cst.Name) and n.value in bound for n in cstwalk.walk(arg.value)):
                return (), False
            else:
                out.append(arg)
        return tuple(out), True

    # ------------------------------------------------------------------ containers
    def _container(self, binding: LayerBinding, call: cst.Call, name: str, conditional: bool,
                   env: dict[str, Held]) -> None:
        self._seen.add(id(call))
        binding.elements = tuple(self._elements(tuple(call.args), name, conditional, env, binding))
        binding.where = self.function
        if binding.statement is None:
            binding.statement = self._line  # None inside a compound statement's header: not reported
        if binding.elements and binding.statement is not None:
            self.containers.append(binding)

    def _elements(self, args: Sequence[cst.Arg], name: str, conditional: bool, env: dict[str, Held],
                  container: LayerBinding) -> list[LayerBinding]:
        """The elements of ``nn.Sequential(args)`` in order; none when some argument is not understood."""
        found: list[LayerBinding] = []
        if len(args) == 1 and not args[0].star and isinstance(args[0].value, cst.Call):
            maker = self.table.resolve(args[0].value.func)
            if maker is not None and maker.endswith("OrderedDict"):
                return self._ordered(args[0].value, name, conditional, env, container)
        for arg in args:
            if arg.keyword is not None:
                return []
            if arg.star == "*":
                listed = self._list_of(arg.value, env)
                if listed is None or listed.tainted:
                    return []
                found.extend(listed.elements)
            elif arg.star:
                return []
            else:
                found.append(self.layer("", arg.value, None, conditional, env))
        if any(e.container is not None for e in found):
            return []  # a list read by two containers: each would need copies of its elements
        out, index = [], 0
        for element in found:
            # Barriers take no index: the children are numbered as nn.Sequential numbers them (exactly where no
            # conditional element comes first).
            out.append(self._element(element, f"{name}.{index}" if name else str(index), container))
            index += element.layer_type.certainty != OPAQUE
        return out

    def _ordered(self, call: cst.Call, name: str, conditional: bool, env: dict[str, Held],
                 container: LayerBinding) -> list[LayerBinding]:
        """``OrderedDict([("conv", nn.Conv2d(...)), ...])``: elements named by their keys."""
        if len(call.args) != 1 or not isinstance(call.args[0].value, (cst.List, cst.Tuple)):
            return []
        out = []
        for el in call.args[0].value.elements:
            pair = el.value
            if not (isinstance(el, cst.Element) and isinstance(pair, cst.Tuple) and len(pair.elements) == 2):
                return []
            key = pair.elements[0].value
            if not isinstance(key, cst.SimpleString):
                return []
            layer = self.layer("", pair.elements[1].value, None, conditional, env)
            out.append(self._element(layer, f"{name}.{key.raw_value}", container))
        return out

    @staticmethod
    def _element(layer: LayerBinding, attr: str, container: LayerBinding) -> LayerBinding:
        layer.attr, layer.container = attr, container
        if not layer.elements:
            layer.statement = None  # a nested container keeps the line it reports at
        return layer

    def _list_of(self, expr: cst.BaseExpression, env: dict[str, Held]) -> Optional[LayerList]:
        if isinstance(expr, cst.Name):
            held = env.get(expr.value)
            return held if isinstance(held, LayerList) else None
        if isinstance(expr, (cst.List, cst.Tuple)):
            listed = LayerList()
            for el in expr.elements:
                if isinstance(el, cst.StarredElement):
                    inner = self._list_of(el.value, env)
                    if inner is None or inner.tainted:
                        return None
                    listed.elements.extend(inner.elements)
                else:
                    listed.elements.append(self.layer("", el.value, None, False, env))
            return listed
        return None

    # ------------------------------------------------------------------ statements
    def _block(self, suite: cst.BaseSuite, env: dict[str, Held], conditional: bool) -> None:
        if isinstance(suite, cst.SimpleStatementSuite):
            for small in suite.body:
                self._small(small, None, env, conditional)
            return
        for stmt in suite.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self._small(small, stmt, env, conditional)
            elif isinstance(stmt, cst.If):
                self._line = None
                self._arms(env, [stmt.body, *self._else_arms(stmt.orelse)], stmt.test, complete=stmt.orelse is not None)
            elif isinstance(stmt, (cst.For, cst.While)):
                self._line = None
                head = stmt.iter if isinstance(stmt, cst.For) else stmt.test
                if isinstance(stmt, cst.For):
                    for sub in cstwalk.walk(stmt.target):
                        if isinstance(sub, cst.Name):
                            env[sub.value] = None
                self._arms(env, [stmt.body] + ([stmt.orelse.body] if stmt.orelse else []), head, complete=False)
            elif isinstance(stmt, cst.With):
                self._line = None
                for item in stmt.items:
                    self._expr(item.item, env)
                self._block(stmt.body, env, conditional)
            elif isinstance(stmt, (cst.Try, cst.TryStar)):
                arms = [stmt.body, *(h.body for h in stmt.handlers)]
                arms += [x.body for x in (stmt.orelse, stmt.finalbody) if x is not None]
                self._arms(env, arms, None, complete=False)
            else:  # nested def/class, match: whatever they capture is unknown
                for sub in cstwalk.walk(stmt):
                    if isinstance(sub, cst.Name):
                        self._taint(sub.value, env)

    @staticmethod
    def _else_arms(orelse: Optional[Union[cst.If, cst.Else]]) -> list[cst.BaseSuite]:
        if orelse is None:
            return []
        if isinstance(orelse, cst.Else):
            return [orelse.body]
        return [orelse.body, *InitReader._else_arms(orelse.orelse)]

    def _arms(self, env: dict[str, Held], arms: list[cst.BaseSuite], head: Optional[cst.BaseExpression],
              complete: bool) -> None:
        """Arms of which one (or, for loops and try, any number) runs: names joined over them and the path
        through none (unless `complete`); each list they grow ends with a barrier (the arms' order is unknown)."""
        if head is not None:
            self._expr(head, env)
        outcomes = []
        for arm in arms:
            arm_env = dict(env)
            sizes = {id(v): len(v.elements) for v in arm_env.values() if isinstance(v, LayerList)}
            self._block(arm, arm_env, True)
            for v in {id(v): v for v in arm_env.values() if isinstance(v, LayerList)}.values():
                if len(v.elements) != sizes.get(id(v), len(v.elements)):
                    v.elements.append(LayerBinding("", None, (), False, cst.Name("None"), None, True,
                                                   layer_type=OPAQUE_TYPE, args_known=False))
            outcomes.append(arm_env)
        if not complete:
            outcomes.append(env)
        for name in {n for o in outcomes for n in o}:
            values = [o.get(name) for o in outcomes]
            env[name] = self._join(values)

    @staticmethod
    def _join(values: list[Held]) -> Held:
        first = values[0]
        if all(v is first for v in values):
            return first
        if all(isinstance(v, Constructor) for v in values):
            joined = values[0]
            assert isinstance(joined, Constructor)
            for v in values[1:]:
                joined = joined.join(v)  # type: ignore[arg-type]
            return joined
        for v in values:
            if isinstance(v, LayerList):
                v.tainted = True  # a list on some paths, something else on others
        return None

    def _small(self, small: cst.BaseSmallStatement, line: Optional[cst.SimpleStatementLine],
               env: dict[str, Held], conditional: bool) -> None:
        self._line = line
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            value = small.value
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            if value is None:
                return
            if len(targets) == 1:
                target = targets[0]
                attr = _self_attr(target)
                if attr is not None and self._bind_self and line is not None:
                    self._bind(attr, value, line, conditional, env)
                    self._expr(value, env)
                    return
                if isinstance(target, cst.Name):
                    env[target.value] = self._value(target.value, value, conditional, env)
                    self._expr(value, env)
                    return
            elif isinstance(value, cst.Name) and value.value == "None":
                # `self.q_proj = self.k_proj = self.v_proj = None` (timm): each attribute bound as by its own line.
                # A chain of any other value binds one object to several attributes, which no binding describes.
                for target in targets:
                    attr = _self_attr(target)
                    if attr is not None and self._bind_self and line is not None:
                        self._bind(attr, value, line, conditional, env)
                    else:
                        self._unknown_target(target, env)
                return
            self._expr(value, env)
            for target in targets:
                self._unknown_target(target, env)
            return
        if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            held = env.get(small.target.value)
            if isinstance(held, LayerList) and isinstance(small.operator, cst.AddAssign):
                self._extend(held, small.value, env)
                return
            self._expr(small.value, env)
            env[small.target.value] = None
            return
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
            func = call.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                held = env.get(func.value.value)
                if isinstance(held, LayerList) and func.attr.value in ("append", "extend") and len(call.args) == 1:
                    if func.attr.value == "append":
                        held.elements.append(self.layer("", call.args[0].value, None, conditional, env))
                        self._expr(call.args[0].value, env)
                    else:
                        self._extend(held, call.args[0].value, env)
                    return
            helper = self.init_helpers.get(_self_attr(func) or "") if self._bind_self else None
            if helper is not None and helper.name.value not in self._reading:
                self._reading.add(helper.name.value)
                for arg in call.args:
                    self._expr(arg.value, env)
                # its parameters hold whatever the call passes: unknown, as a caller's arguments are
                self._block(helper.body, self._params(helper, method=True), conditional)
                self._reading.discard(helper.name.value)
                return
            if self.sequential_base is not None and _is_super_init(call) and line is not None:
                container = LayerBinding(
                    "", "torch.nn.Sequential", tuple(call.args), False, self.sequential_base, line, conditional,
                    layer_type=certain("torch.nn.Sequential"), direct=False,
                )
                self._seen.add(id(call))
                container.elements = tuple(self._elements(tuple(call.args), "", conditional, env, container))
                container.where = self.function
                if container.elements:
                    self.containers.append(container)
                return
        for sub in cstwalk.children(small):
            if isinstance(sub, cst.BaseExpression):
                self._expr(sub, env)

    def _bind(self, attr: str, value: cst.BaseExpression, line: cst.SimpleStatementLine, conditional: bool,
              env: dict[str, Held]) -> None:
        """``self.<attr> = <value>`` in __init__."""
        made = self.constructor(value, env)
        # Bound twice (or in an arm): what the attribute holds later is not one constructor.
        seen = attr in self._attr_constructors or conditional
        self._attr_constructors[attr] = None if seen else made
        self.bindings.setdefault(attr, []).append(self.layer(attr, value, line, conditional, env))

    def _unknown_target(self, target: cst.BaseExpression, env: dict[str, Held]) -> None:
        """Names an assignment binds to something not modelled: unknown from here on."""
        for sub in cstwalk.walk(target):
            if isinstance(sub, cst.Name):
                self._taint(sub.value, env)
                env[sub.value] = None

    def _value(self, name: str, value: cst.BaseExpression, conditional: bool, env: dict[str, Held]) -> Held:
        if isinstance(value, (cst.List, cst.Tuple)) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            listed = self._list_of(value, env)
            if isinstance(value, cst.List):
                return listed
            return None
        made = self.constructor(value, env)
        if made is not None:
            return made
        if isinstance(value, cst.Call) and not _is_super_init(value):
            binding = self.layer(name, value, None, conditional, env)
            return binding if binding.layer_type.certainty != UNKNOWN else None
        return None

    def _extend(self, held: LayerList, value: cst.BaseExpression, env: dict[str, Held]) -> None:
        listed = self._list_of(value, env)
        if listed is None or listed.tainted:
            held.tainted = True
            self._expr(value, env)
        else:
            held.elements.extend(listed.elements)

    def _taint(self, name: str, env: dict[str, Held]) -> None:
        held = env.get(name)
        if isinstance(held, LayerList):
            held.tainted = True

    def _expr(self, expr: cst.BaseExpression, env: dict[str, Held]) -> None:
        """Read an expression evaluated for its effects: nn.Sequential calls in it become containers, and any list
        it mentions other than as ``*layers`` of such a call may be changed by what receives it."""
        if self.sequential_calls:
            for node in cstwalk.walk(expr):
                if isinstance(node, cst.Call) and id(node) not in self._seen:
                    qualname = self.table.resolve(node.func)
                    if qualname is not None and qualname_matches("torch.nn.Sequential", canonical_torch_name(qualname)):
                        binding = LayerBinding("", "torch.nn.Sequential", tuple(node.args), False, node, None, False,
                                               layer_type=certain("torch.nn.Sequential"))
                        self._container(binding, node, ANONYMOUS_CONTAINER, False, env)
        if not any(isinstance(held, LayerList) for held in env.values()):
            return  # the common case: no list being built, nothing to taint
        starred = {id(a.value) for n in cstwalk.walk(expr) if isinstance(n, cst.Call) and id(n) in self._seen
                   for a in n.args if a.star}
        for node in cstwalk.walk(expr):
            if isinstance(node, cst.Name) and id(node) not in starred:
                self._taint(node.value, env)
