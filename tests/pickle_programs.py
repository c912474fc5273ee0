"""Batched functions that tests/test_pickling.py sends to other processes.

`fib` and `collatz` are defined at the top level of this importable
module, so they pickle by name (plain `pickle` too); `make_tribonacci`
defines one inside a function, which pickles by value.  `report` is what
a worker runs: a call, and what the worker's Context did for it.
"""

import os

import numpy as np

import autobatch_vm as ab

ctx = ab.Context()


@ctx.batch
def fib(n):
  if n > 2:
    return fib(n - 1) + fib(n - 2)
  return n * 0 + 1


@ctx.batch
def collatz(n):
  steps = n * 0
  while n > 1:
    if n % 2 == 0:
      n = n // 2
    else:
      n = 3 * n + 1
    steps = steps + 1
  return steps


def make_tribonacci():
  """A batched function (and its Context) defined inside a function."""
  local = ab.Context()

  @local.batch
  def tribonacci(n):
    if n < 3:
      return n * 0 + 1
    return tribonacci(n - 1) + tribonacci(n - 2) + tribonacci(n - 3)

  return tribonacci


def report(fn, n):
  """Calls `fn(n)` in a worker: (outputs, worker pid, id of fn's Context,
  whether that Context has compiled from source)."""
  out = fn(np.asarray(n))
  return out, os.getpid(), id(fn.context), fn.context.compiled
