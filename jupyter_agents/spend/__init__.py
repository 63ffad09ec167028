"""Spend: what agents cost and the limit of what they may spend unattended.

Usage records read from the agents' conversation files and priced (``usage``), the
totals, attendance stretches and allowances kept per session (``ledger``), and limits
as values: parsed, described, weighed against an allowance (``limits``). Stands on the
agents wing (the conversation archive) and the core.
"""
