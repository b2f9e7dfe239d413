"""Model zoo for the trace-time benchmark, built from code (nothing is downloaded).

Every entry has two sizes:

* ``small``: tiny configurations for CI and graph-identity tests (a stock
  ``torch.compile(backend="aot_eager")`` traces in about a second);
* ``default``: realistic architectures sized so that one stock aot_eager compile
  takes well under a minute on a 2-core CPU machine (see bench/README.md for
  measured times).

Transformers come from the ``transformers`` package (random weights from a
config) when it is importable, otherwise from the built-in ``torch.nn``
equivalents below. ``MODELS[name].create(size)`` returns ``(model, inputs)``;
the model is in eval mode and every model returns a tensor or a tuple of tensors.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = ("small", "default")


def have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except Exception:
        return False
    return True


# --------------------------------------------------------------------------- #
# Registry
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str  # "conv" or "transformer"
    build: Callable[[str], nn.Module]  # size -> module (random weights)
    make_inputs: Callable[[str], tuple]  # size -> tuple of example inputs
    description: str = ""

    def create(self, size: str = "default", *, seed: int = 0) -> tuple[nn.Module, tuple]:
        """Build the model (eval mode) and its example inputs, deterministically."""
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; expected one of {SIZES}")
        torch.manual_seed(seed)
        model = self.build(size).eval()
        inputs = self.make_inputs(size)
        return model, inputs

    def backend(self) -> str:
        """Where the implementation comes from ("transformers" or "torch.nn")."""
        if self.kind == "transformer" and self.name != "vit" and have_transformers():
            return "transformers"
        return "torch.nn"


MODELS: dict[str, ModelSpec] = {}


def _register(spec: ModelSpec) -> ModelSpec:
    MODELS[spec.name] = spec
    return spec


# --------------------------------------------------------------------------- #
# ResNet (resnet18-like)
# --------------------------------------------------------------------------- #


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), widths=(64, 128, 256, 512), num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        inplanes = widths[0]
        for i, (n, w) in enumerate(zip(layers, widths)):
            blocks = []
            for j in range(n):
                blocks.append(BasicBlock(inplanes, w, stride=2 if (j == 0 and i > 0) else 1))
                inplanes = w
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def _resnet(size: str) -> nn.Module:
    if size == "small":
        return ResNet(layers=(1, 1), widths=(8, 16), num_classes=10)
    return ResNet(layers=(2, 2, 2, 2), widths=(64, 128, 256, 512), num_classes=1000)


def _image_inputs(size: str, default_hw: int = 224) -> tuple:
    if size == "small":
        return (torch.randn(2, 3, 32, 32),)
    return (torch.randn(8, 3, default_hw, default_hw),)


_register(
    ModelSpec(
        "resnet",
        "conv",
        _resnet,
        lambda size: _image_inputs(size, 224),
        "resnet18-like (BasicBlock 2-2-2-2, 64..512), batch 8 x 3x224x224",
    )
)


# --------------------------------------------------------------------------- #
# HRNet-style multi-branch convnet
# --------------------------------------------------------------------------- #


def _conv_bn_relu(cin, cout, stride=1, relu=True):
    layers = [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class HRModule(nn.Module):
    """Parallel branches at decreasing resolution + all-to-all fusion (HRNet)."""

    def __init__(self, widths: list[int], blocks_per_branch: int):
        super().__init__()
        self.branches = nn.ModuleList(
            nn.Sequential(*[BasicBlock(w, w) for _ in range(blocks_per_branch)]) for w in widths
        )
        n = len(widths)
        self.fuse = nn.ModuleList()
        for i in range(n):  # target branch
            row = nn.ModuleList()
            for j in range(n):  # source branch
                if j == i:
                    row.append(nn.Identity())
                elif j > i:  # lower resolution source: 1x1 conv then upsample
                    row.append(
                        nn.Sequential(nn.Conv2d(widths[j], widths[i], 1, bias=False), nn.BatchNorm2d(widths[i]))
                    )
                else:  # higher resolution source: strided 3x3 convs
                    convs = []
                    for k in range(i - j):
                        last = k == i - j - 1
                        cout = widths[i] if last else widths[j]
                        convs.append(_conv_bn_relu(widths[j], cout, stride=2, relu=not last))
                    row.append(nn.Sequential(*convs))
            self.fuse.append(row)

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        xs = [b(x) for b, x in zip(self.branches, xs)]
        out = []
        for i, row in enumerate(self.fuse):
            y = xs[i]
            for j, f in enumerate(row):
                if j == i:
                    continue
                z = f(xs[j])
                if j > i:
                    z = F.interpolate(z, size=xs[i].shape[-2:], mode="nearest")
                y = y + z
            out.append(F.relu(y))
        return out


class HRNet(nn.Module):
    def __init__(self, base: int = 18, num_stages: int = 4, blocks_per_branch: int = 2, stem: int = 64,
                 num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn_relu(3, stem, 2), _conv_bn_relu(stem, stem, 2))
        widths = [base * 2**i for i in range(num_stages)]
        self.widths = widths
        self.transitions = nn.ModuleList()
        self.stages = nn.ModuleList()
        prev = [stem]
        for s in range(1, num_stages + 1):
            cur = widths[:s]
            trans = nn.ModuleList()
            for i, w in enumerate(cur):
                if i < len(prev):
                    trans.append(nn.Identity() if prev[i] == w else _conv_bn_relu(prev[i], w))
                else:  # new lower-resolution branch from the last one
                    trans.append(_conv_bn_relu(prev[-1], w, stride=2))
            self.transitions.append(trans)
            self.stages.append(HRModule(cur, blocks_per_branch))
            prev = cur
        self.head = nn.Linear(sum(widths), num_classes)

    def forward(self, x):
        xs = [self.stem(x)]
        for trans, stage in zip(self.transitions, self.stages):
            new = []
            for i, t in enumerate(trans):
                src = xs[i] if i < len(xs) else xs[-1]
                new.append(t(src))
            xs = stage(new)
        pooled = [F.adaptive_avg_pool2d(x, 1).flatten(1) for x in xs]
        return self.head(torch.cat(pooled, dim=1))


def _hrnet(size: str) -> nn.Module:
    if size == "small":
        return HRNet(base=4, num_stages=2, blocks_per_branch=1, stem=8, num_classes=10)
    return HRNet(base=18, num_stages=4, blocks_per_branch=1, stem=64, num_classes=1000)


_register(
    ModelSpec(
        "hrnet",
        "conv",
        _hrnet,
        lambda size: _image_inputs(size, 128),
        "HRNet-W18-style, 4 stages / up to 4 parallel branches with all-to-all fusion, batch 8 x 3x128x128",
    )
)


# --------------------------------------------------------------------------- #
# ViT
# --------------------------------------------------------------------------- #


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        h = self.norm1(x)
        qkv = self.qkv(h).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        attn = attn.softmax(dim=-1)
        h = (attn @ v).transpose(1, 2).reshape(b, n, c)
        x = x + self.proj(h)
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return x


class ViT(nn.Module):
    def __init__(self, image: int, patch: int, dim: int, depth: int, heads: int, num_classes: int):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def _vit(size: str) -> nn.Module:
    if size == "small":
        return ViT(image=32, patch=8, dim=32, depth=2, heads=2, num_classes=10)
    # ViT-S/16 width, 6 blocks.
    return ViT(image=224, patch=16, dim=384, depth=6, heads=6, num_classes=1000)


_register(
    ModelSpec(
        "vit",
        "transformer",
        _vit,
        lambda size: _image_inputs(size, 224),
        "ViT-S/16-style (dim 384, 6 heads, 6 blocks), batch 8 x 3x224x224",
    )
)


# --------------------------------------------------------------------------- #
# Built-in transformer fallbacks (used only when `transformers` is missing)
# --------------------------------------------------------------------------- #


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False, cross: bool = False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x, mem=None):
        mem = x if mem is None else mem
        b, n, c = x.shape
        m = mem.shape[1]
        d = c // self.heads
        q = self.q(x).view(b, n, self.heads, d).transpose(1, 2)
        k = self.k(mem).view(b, m, self.heads, d).transpose(1, 2)
        v = self.v(mem).view(b, m, self.heads, d).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        if self.causal:
            mask = torch.ones(n, m, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, n, c))


class _Layer(nn.Module):
    def __init__(self, dim, heads, ff, causal=False, cross=False, pre_norm=False):
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = _Attention(dim, heads, causal)
        self.n1 = nn.LayerNorm(dim)
        self.cross = _Attention(dim, heads) if cross else None
        self.nc = nn.LayerNorm(dim) if cross else None
        self.ff1 = nn.Linear(dim, ff)
        self.ff2 = nn.Linear(ff, dim)
        self.n2 = nn.LayerNorm(dim)

    def forward(self, x, mem=None):
        if self.pre_norm:
            x = x + self.attn(self.n1(x))
            if self.cross is not None:
                x = x + self.cross(self.nc(x), mem)
            return x + self.ff2(F.gelu(self.ff1(self.n2(x))))
        x = self.n1(x + self.attn(x))
        if self.cross is not None:
            x = self.nc(x + self.cross(x, mem))
        return self.n2(x + self.ff2(F.gelu(self.ff1(x))))


class _EncoderLM(nn.Module):
    """BERT-like (post-norm, bidirectional) or GPT-2-like (pre-norm, causal)."""

    def __init__(self, vocab, dim, heads, ff, depth, max_pos, causal):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_pos, dim)
        self.layers = nn.ModuleList(_Layer(dim, heads, ff, causal=causal, pre_norm=causal) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.tok(input_ids) + self.pos(pos)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class _EncoderDecoder(nn.Module):
    """T5-like encoder-decoder (pre-norm, causal decoder with cross-attention)."""

    def __init__(self, vocab, dim, heads, ff, depth, max_pos):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_pos, dim)
        self.enc = nn.ModuleList(_Layer(dim, heads, ff, pre_norm=True) for _ in range(depth))
        self.dec = nn.ModuleList(_Layer(dim, heads, ff, causal=True, cross=True, pre_norm=True) for _ in range(depth))
        self.enc_norm = nn.LayerNorm(dim)
        self.dec_norm = nn.LayerNorm(dim)

    def forward(self, input_ids, decoder_input_ids):
        pe = self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        x = self.tok(input_ids) + pe
        for layer in self.enc:
            x = layer(x)
        mem = self.enc_norm(x)
        pd = self.pos(torch.arange(decoder_input_ids.shape[1], device=decoder_input_ids.device))
        y = self.tok(decoder_input_ids) + pd
        for layer in self.dec:
            y = layer(y, mem)
        return self.dec_norm(y), mem


# --------------------------------------------------------------------------- #
# transformers-based models
# --------------------------------------------------------------------------- #


class HFWrapper(nn.Module):
    """Calls a transformers model with ``return_dict=False`` and returns tensors only."""

    def __init__(self, model: nn.Module, n_out: int = 1, arg_names: tuple[str, ...] = ("input_ids",)):
        super().__init__()
        self.model = model
        self.n_out = n_out
        self.arg_names = arg_names

    def forward(self, *args):
        out = self.model(**dict(zip(self.arg_names, args)), return_dict=False)
        if self.n_out == 1:
            return out[0]
        return tuple(out[: self.n_out])


# (small, default) hyper-parameters.
_TXT = {
    "small": dict(batch=2, seq=16, vocab=128, dim=64, heads=2, ff=128, depth=2),
    "default": None,  # per model below
}
_BERT_DEFAULT = dict(batch=8, seq=128, vocab=30522, dim=768, heads=12, ff=3072, depth=6)
_GPT2_DEFAULT = dict(batch=8, seq=128, vocab=50257, dim=768, heads=12, ff=3072, depth=4)
_T5_DEFAULT = dict(batch=8, seq=128, vocab=32128, dim=512, heads=8, ff=2048, depth=2)
_LLAMA_DEFAULT = dict(batch=4, seq=128, vocab=32000, dim=512, heads=8, ff=1376, depth=6)


def _hp(size: str, default: dict) -> dict:
    return dict(_TXT["small"]) if size == "small" else dict(default)


def _token_inputs(hp: dict, n: int = 1) -> tuple:
    return tuple(torch.randint(0, hp["vocab"], (hp["batch"], hp["seq"])) for _ in range(n))


def _bert(size: str) -> nn.Module:
    hp = _hp(size, _BERT_DEFAULT)
    if have_transformers():
        from transformers import BertConfig, BertModel

        cfg = BertConfig(
            vocab_size=hp["vocab"],
            hidden_size=hp["dim"],
            num_hidden_layers=hp["depth"],
            num_attention_heads=hp["heads"],
            intermediate_size=hp["ff"],
            max_position_embeddings=512,
        )
        return HFWrapper(BertModel(cfg, add_pooling_layer=True), n_out=2)
    return _EncoderLM(hp["vocab"], hp["dim"], hp["heads"], hp["ff"], hp["depth"], 512, causal=False)


def _gpt2(size: str) -> nn.Module:
    hp = _hp(size, _GPT2_DEFAULT)
    if have_transformers():
        from transformers import GPT2Config, GPT2Model

        cfg = GPT2Config(
            vocab_size=hp["vocab"],
            n_embd=hp["dim"],
            n_layer=hp["depth"],
            n_head=hp["heads"],
            n_inner=hp["ff"],
            n_positions=1024,
            bos_token_id=hp["vocab"] - 1,
            eos_token_id=hp["vocab"] - 1,
            use_cache=False,
        )
        return HFWrapper(GPT2Model(cfg))
    return _EncoderLM(hp["vocab"], hp["dim"], hp["heads"], hp["ff"], hp["depth"], 1024, causal=True)


def _t5(size: str) -> nn.Module:
    hp = _hp(size, _T5_DEFAULT)
    if have_transformers():
        from transformers import T5Config, T5Model

        cfg = T5Config(
            vocab_size=hp["vocab"],
            d_model=hp["dim"],
            d_kv=hp["dim"] // hp["heads"],
            d_ff=hp["ff"],
            num_layers=hp["depth"],
            num_decoder_layers=hp["depth"],
            num_heads=hp["heads"],
            use_cache=False,
        )
        # (decoder last_hidden_state, encoder last_hidden_state) with use_cache=False
        return HFWrapper(T5Model(cfg), n_out=2, arg_names=("input_ids", "decoder_input_ids"))
    return _EncoderDecoder(hp["vocab"], hp["dim"], hp["heads"], hp["ff"], hp["depth"], 512)


def _llama(size: str) -> nn.Module:
    hp = _hp(size, _LLAMA_DEFAULT)
    if have_transformers():
        from transformers import LlamaConfig, LlamaModel

        cfg = LlamaConfig(
            vocab_size=hp["vocab"],
            hidden_size=hp["dim"],
            intermediate_size=hp["ff"],
            num_hidden_layers=hp["depth"],
            num_attention_heads=hp["heads"],
            num_key_value_heads=hp["heads"],
            max_position_embeddings=2048,
            use_cache=False,
        )
        return HFWrapper(LlamaModel(cfg))
    return _EncoderLM(hp["vocab"], hp["dim"], hp["heads"], hp["ff"], hp["depth"], 2048, causal=True)


_register(
    ModelSpec(
        "bert",
        "transformer",
        _bert,
        lambda size: _token_inputs(_hp(size, _BERT_DEFAULT)),
        "BERT-base width (768/12 heads/3072), 6 layers, batch 8 x seq 128",
    )
)
_register(
    ModelSpec(
        "gpt2",
        "transformer",
        _gpt2,
        lambda size: _token_inputs(_hp(size, _GPT2_DEFAULT)),
        "GPT-2 width (768/12 heads/3072), 4 layers, batch 8 x seq 128",
    )
)
_register(
    ModelSpec(
        "t5",
        "transformer",
        _t5,
        lambda size: _token_inputs(_hp(size, _T5_DEFAULT), n=2),
        "T5-small width (512/8 heads/2048), 2+2 layers, batch 8 x seq 128 (enc and dec)",
    )
)

_register(
    ModelSpec(
        "llama",
        "transformer",
        _llama,
        lambda size: _token_inputs(_hp(size, _LLAMA_DEFAULT)),
        "Llama-style (RMSNorm, rotary, SwiGLU; 512/8 heads/1376), 6 layers, batch 4 x seq 128",
    )
)

MODEL_NAMES: tuple[str, ...] = tuple(MODELS)
#: What ``python -m bench`` runs without --models (bench/README.md): BERT-, GPT-2-,
#: T5- and Llama-style transformers; ``--models all`` adds the convnets and ViT.
DEFAULT_MODELS: tuple[str, ...] = ("bert", "gpt2", "t5", "llama")


def get(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; available: {', '.join(MODELS)}") from None
