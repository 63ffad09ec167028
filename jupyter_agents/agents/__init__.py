"""Agents: everything that depends on which program runs in a session.

The kinds (what runs, how it resumes, how its conversation id is known), attention from
their hooks and screens, their conversation files and the archive of them. Stands on the
core only.

Built in: ``shell`` (the terminal shell), ``claude`` (Claude Code), ``codex`` (Codex
CLI), ``gemini`` (Gemini CLI), ``copilot`` (GitHub Copilot CLI), ``qwen`` (Qwen Code) and
``opencode`` (OpenCode); more come from ``AgentsApp.agents`` (see :class:`~.shell.CustomKind`).

Each concern is a module: :mod:`~.kinds` (which kinds there are), :mod:`~.base` (what a
kind is), one per CLI, :mod:`~.spool` (what hooks record), :mod:`~.attention`,
:mod:`~.permissions`, :mod:`~.conversations` and :mod:`~.archive`. This package imports
none of them, so the hook (:mod:`jupyter_agents.hook`) loads only :mod:`~.spool`.
"""
