"""Run `converge ARGS` as the user `nobody`, for whom a store owned by root is read-only.

Tests run as root, which file modes do not stop. This script imports what the read commands
need (the interpreter's own files may not be readable by `nobody`), drops to `nobody`'s user
and group, then runs the command line in this process. Used by `test_sqlite_store.py`.
"""

from __future__ import annotations

import asyncio
import email.message  # pyright: ignore[reportUnusedImport]  (Python 3.13 imports it late)
import email.utils  # pyright: ignore[reportUnusedImport]
import json
import os
import pwd
import sqlite3
import sys

import anyio._backends._asyncio  # pyright: ignore[reportUnusedImport]

import converge._cli._read  # pyright: ignore[reportUnusedImport]
import converge._report._render  # pyright: ignore[reportUnusedImport]
from converge.cli import main

del asyncio, email, json, sqlite3, anyio, converge  # imported for after the privileges are gone

user = pwd.getpwnam("nobody")
os.setgroups([])
os.setgid(user.pw_gid)
os.setuid(user.pw_uid)
sys.exit(main(sys.argv[1:]))
