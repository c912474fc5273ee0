"""How large the values a TensorFlow primitive makes are, per member.

Type inference runs each primitive once on made-up inputs of a small
batch (`TensorFlowBackend.call_for_types`, `TensorFlowBackend.trace`).
`note` looks at the ops that call built: of those that depend on the
inputs (not constants, nor values made from constants alone), the
largest output with a static shape, in elements per member.  The staged
loop reads it back for each block's primitives (`block_elements`) to
find the blocks whose work XLA can split over threads
(`knobs.TuningKnobs.heavy_block_elements`).

The figures are kept per primitive function, while it lives, in a
process-wide weak table; a function that cannot be weakly referenced,
or a primitive whose ops were not seen (an eager primitive that runs
Python on values, a program shipped from another process), counts as
small.
"""

import weakref

import tensorflow as tf

__all__ = ['note', 'elements', 'block_elements']

_ELEMENTS = weakref.WeakKeyDictionary()


def note(fn, ops, args, batch):
  """Records the largest input-dependent value of `fn`'s ops per member.

  Args:
    fn: The primitive.
    ops: The ops its call created, in the order it created them.
    args: The arguments it was called with (tensors among them are the
      inputs).
    batch: Their batch size.
  """
  inputs = {t.ref() for t in tf.nest.flatten(args) if tf.is_tensor(t)}
  largest = 0
  for op in ops:
    if not any(t.ref() in inputs for t in op.inputs):
      continue
    for out in op.outputs:
      inputs.add(out.ref())
      n = out.shape.num_elements()
      if n is not None:
        largest = max(largest, n // max(int(batch), 1))
  try:
    _ELEMENTS[fn] = max(_ELEMENTS.get(fn, 0), largest)
  except TypeError:   # not weakly referenceable
    pass


def elements(fn):
  """The largest value per member `note` saw `fn` make (0 if none)."""
  try:
    return _ELEMENTS.get(fn, 0)
  except TypeError:
    return 0


def block_elements(block_fn):
  """The largest value per member of a compiled block's primitives.

  Args:
    block_fn: A compiled block (`vm.closures`), whose `prims` attribute
      lists its primitives' functions.

  Returns:
    Elements per member, 0 if the block has no primitive seen.
  """
  return max((elements(f) for f in getattr(block_fn, 'prims', ())),
             default=0)
