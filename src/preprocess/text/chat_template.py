"""Chat templates: render messages as transformers' ``apply_chat_template`` does.

The template comes from the repo (``chat_template.jinja``, ``chat_template.json``, or
``tokenizer_config.json``'s ``chat_template``: a string, or a list of named templates). It renders
in Jinja2's immutable sandbox with transformers' environment: ``trim_blocks``/``lstrip_blocks``,
the ``loopcontrols`` extension, a ``{% generation %}`` block (rendered as its body), the
``tojson`` filter with transformers' arguments, and the ``raise_exception`` / ``strftime_now``
globals. The tokenizer's special tokens (``bos_token``, ``eos_token``, ...) are variables.
"""

import contextvars
import datetime
import functools
import json

from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ...errors import InputError

ROLES = ("system", "user", "assistant", "tool", "developer")
# Bounds of one render (module settings: raise them here for a template that needs more). A
# real template loops over the messages and a few ranges and writes a prompt of some thousand
# characters; a hostile one nests ranges (10**10 steps) or repeats a string past memory.
MAX_LOOP_STEPS = 10**6  # items of every range() in the render, together
MAX_PROMPT_CHARS = 2**25  # characters rendered (and of one string a '*' makes)
_steps_left = contextvars.ContextVar("chat_template_steps")


class ChatTemplateError(InputError):
    """No template, a template that raised, or messages a template cannot take."""


def find_template(repo=None, tokenizer_config=None, name=None, tools=None):
    """The template source: a named one when ``name`` is given (or ``tool_use`` with tools)."""
    templates = None
    if repo is not None and repo.has("chat_template.jinja"):
        with open(repo.file("chat_template.jinja"), encoding="utf-8") as f:
            templates = f.read()
    elif repo is not None and repo.has("chat_template.json"):
        templates = repo.json("chat_template.json", {}).get("chat_template")
    if templates is None:
        templates = (tokenizer_config or {}).get("chat_template")
    if templates is None:
        raise ChatTemplateError("This model has no chat template (tokenizer_config.json "
                                "chat_template, chat_template.jinja or chat_template.json); give "
                                "a plain string prompt instead of messages")
    if isinstance(templates, str):
        return templates
    named = {t["name"]: t["template"] for t in templates}
    if name is None:
        name = "tool_use" if tools and "tool_use" in named else "default"
    if name not in named:
        raise ChatTemplateError(f"No chat template named {name!r}; the repo has {sorted(named)}")
    return named[name]


def special_tokens(tokenizer_config):
    """The tokenizer's ``special_tokens_map`` as transformers gives it to templates."""
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token", "additional_special_tokens"):
        value = (tokenizer_config or {}).get(key)
        if value is not None:
            out[key] = [_content(v) for v in value] if isinstance(value, list) else _content(value)
    return out


def _content(token):
    return token.get("content") if isinstance(token, dict) else token


def check_messages(messages, roles=ROLES):
    """A clear error for anything but a list of {"role", "content"} dicts with known roles."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChatTemplateError(f"Chat messages must be a non-empty list of dicts, got "
                                f"{messages!r:.80}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ChatTemplateError(f"Message {i} must be a dict with a 'role', got {m!r:.80}")
        if m["role"] not in roles:
            raise ChatTemplateError(f"Message {i} has unknown role {m['role']!r}; roles are "
                                    f"{', '.join(roles)}")
    return list(messages)


def render(template, messages, *, add_generation_prompt=True, special_tokens=None, tools=None,
           documents=None, roles=ROLES, **template_options):
    """The prompt string the template makes of ``messages`` (whose roles must be in ``roles``:
    a reranker's pairs add sentence-transformers' "query" and "document")."""
    # transformers passes tools and documents even when None (``tools is none`` tests see it)
    variables = dict(special_tokens or {}, tools=tools, documents=documents)
    variables.update(template_options)
    try:
        compiled = _compile(template)
        token = _steps_left.set(MAX_LOOP_STEPS)
        try:
            return _bounded_join(compiled.generate(
                messages=check_messages(messages, roles), add_generation_prompt=add_generation_prompt,
                **variables))
        finally:
            _steps_left.reset(token)
    except ChatTemplateError:
        raise
    except Exception as e:
        raise ChatTemplateError(f"The chat template raised {type(e).__name__}: {e}") from e


class _Generation(Extension):
    # transformers' AssistantTracker marks assistant spans; the text is the body itself
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


class _Bounded(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context, operator, left, right):
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)


@functools.lru_cache(maxsize=16)
def _compile(template):
    env = _Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.globals["range"] = _range
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template)


def _bounded_join(pieces):
    out, size = [], 0
    for piece in pieces:
        size += len(piece)
        if size > MAX_PROMPT_CHARS:
            raise ChatTemplateError(f"The chat template wrote more than {MAX_PROMPT_CHARS:,} "
                                    "characters: it does not end as a prompt should")
        out.append(piece)
    return "".join(out)


def _range(*args):
    """range() that draws its items from the render's MAX_LOOP_STEPS."""
    items = range(*args)
    left = _steps_left.get(MAX_LOOP_STEPS) - len(items)
    if left < 0:
        raise ChatTemplateError(f"The chat template's loops ran past {MAX_LOOP_STEPS:,} range "
                                "steps: it does not end as a template should")
    _steps_left.set(left)
    return items


def _check_binop(operator, left, right):
    """Refuse a '*' that repeats a string or list past MAX_PROMPT_CHARS, and a '**' whose result
    would take more than a few thousand digits (both run for minutes or exhaust memory)."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and \
                    len(seq) * times > MAX_PROMPT_CHARS:
                raise ChatTemplateError(f"The chat template repeats a {type(seq).__name__} "
                                        f"{times:,} times: past {MAX_PROMPT_CHARS:,} items")
    elif isinstance(left, int) and isinstance(right, int) and right > 0 and \
            abs(left) > 1 and right * max(abs(left).bit_length(), 1) > 10**5:
        raise ChatTemplateError(f"The chat template computes {left} ** {right}: a number of "
                                "more than 100,000 bits")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' tojson: json.dumps without Jinja's HTML escaping
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise(message):
    raise ChatTemplateError(f"The chat template refused the messages: {message}")
