"""Chat templates: render messages as transformers' ``apply_chat_template`` does.

The template comes from the repo (``chat_template.jinja``, ``chat_template.json``, or
``tokenizer_config.json``'s ``chat_template``: a string, or a list of named templates). It renders
in Jinja2's immutable sandbox with transformers' environment: ``trim_blocks``/``lstrip_blocks``,
the ``loopcontrols`` extension, a ``{% generation %}`` block (rendered as its body), the
``tojson`` filter with transformers' arguments, and the ``raise_exception`` / ``strftime_now``
globals. The tokenizer's special tokens (``bos_token``, ``eos_token``, ...) are variables.
"""

import datetime
import functools
import json

from ..errors import InputError

ROLES = ("system", "user", "assistant", "tool", "developer")


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


def check_messages(messages):
    """A clear error for anything but a list of {"role", "content"} dicts with known roles."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChatTemplateError(f"Chat messages must be a non-empty list of dicts, got "
                                f"{messages!r:.80}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ChatTemplateError(f"Message {i} must be a dict with a 'role', got {m!r:.80}")
        if m["role"] not in ROLES:
            raise ChatTemplateError(f"Message {i} has unknown role {m['role']!r}; roles are "
                                    f"{', '.join(ROLES)}")
    return list(messages)


def render(template, messages, *, add_generation_prompt=True, special_tokens=None, tools=None,
           documents=None, **template_options):
    """The prompt string the template makes of ``messages``."""
    # transformers passes tools and documents even when None (``tools is none`` tests see it)
    variables = dict(special_tokens or {}, tools=tools, documents=documents)
    variables.update(template_options)
    try:
        compiled = _compile(template)
        return compiled.render(messages=check_messages(messages),
                               add_generation_prompt=add_generation_prompt, **variables)
    except ChatTemplateError:
        raise
    except Exception as e:
        raise ChatTemplateError(f"The chat template raised {type(e).__name__}: {e}") from e


@functools.lru_cache(maxsize=16)
def _compile(template):
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        # transformers' AssistantTracker marks assistant spans; the text is the body itself
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' tojson: json.dumps without Jinja's HTML escaping
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise(message):
    raise ChatTemplateError(f"The chat template refused the messages: {message}")
