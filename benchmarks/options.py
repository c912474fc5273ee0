"""The benchmark's command-line flags, shared by its modules.

`benchmarks/run.py` parses them (absl); the modules read them when they
run, so a worker process started with the same command line measures
under the same settings.
"""

import os

from absl import flags

from benchmarks import workloads

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FLAGS = flags.FLAGS
flags.DEFINE_boolean('quick', False, 'A check of an install in a few '
                     'minutes: one small batch per workload, and every '
                     'flag not given on the command line at its value in '
                     '`QUICK` (one process, few repeats, no memory '
                     'processes, no schedule table, no ESS comparison).')
flags.DEFINE_list('workloads', ['fibonacci', 'collatz', 'tree_rnn', 'nuts',
                               'tfp_nuts'],
                  'Workloads to run.')
flags.DEFINE_list('backends', ['numpy', 'stackless', 'function', 'xla'],
                  'numpy (the stack VM: stackless=False), stackless '
                  '(NumPy with stackless=True: fibonacci and tree-RNN '
                  'only, the programs NumPy\'s default mode runs '
                  'stackless), function (tf.function), xla '
                  '(jit_compile=True).')
flags.DEFINE_list('batch_sizes', [], 'Batch sizes (NUTS: chains) of every '
                  'workload; empty: each workload\'s own '
                  '(`cells.batch_sizes`).')
flags.DEFINE_integer('repeats', 3, 'Timed repeats per cell (median).')
flags.DEFINE_integer('nuts_repeats', 7, 'Least timed repeats per NUTS cell '
                     '(a call takes 0.02-0.6 s, and this machine\'s speed '
                     'drifts).')
flags.DEFINE_float('min_seconds', 1.0, 'More repeats (up to --max_repeats) '
                   'until our timed calls of a cell add up to this.')
flags.DEFINE_integer('max_repeats', 25, 'Most timed repeats per cell.')
flags.DEFINE_float('alone_seconds', 2.0, 'Time for the "alone" baseline of '
                   'a cell: every member runs alone if that fits, else as '
                   'many as fit (the time scaled to the batch).')
flags.DEFINE_enum('schedule', 'most', ['lowest', 'most'],
                  'VM schedule of the main table (the library default).')
flags.DEFINE_integer('schedule_batch', 64, 'Batch size (NUTS: chains) of '
                     'the table comparing both schedules; 0: no table.')
flags.DEFINE_integer('nuts_ess_samples', 500, 'Samples per chain for the '
                     'NUTS effective-samples-per-second comparison at 64 '
                     'chains (0: skip).  Fewer make a noisy estimate: over '
                     'ten windows of 100 samples, the ratio of our min ESS '
                     'to the hand-batched sampler\'s ranged 0.88-1.06 '
                     '(0.96-0.97 over 500 or 1,000 samples).')
flags.DEFINE_integer('nuts_ess_chunk', 25, 'Transitions per call of our '
                     'sampler in the NUTS ESS comparison: the NUTS '
                     'example\'s default chunk.  Within a call each chain '
                     'runs its own transitions, and the chains wait for '
                     'each other only at its end (TFP\'s samplers draw all '
                     'the samples in one call).  The draws are the same for '
                     'any chunk; 50 transitions at 64 chains took 442 ms in '
                     'calls of 5 and 420 ms in calls of 25 on tf.function, '
                     '268 and 229 ms under XLA.')
flags.DEFINE_integer('nuts_processes', 3, 'Fresh processes measuring NUTS '
                     'on each TensorFlow backend; each figure is the median '
                     'over them.  In one process in four or five, graph-'
                     'mode steps run at a slower speed for its whole life '
                     '(the guide\'s "Two speeds per process"), and ours, '
                     'many small ops per step, slow more than the hand-'
                     'batched sampler: its time over ours went from 0.70 '
                     'to 0.63 in such a process.')
flags.DEFINE_integer('nuts_ess_repeats', 3, 'Timed runs per system of the '
                     'NUTS ESS comparison, in turns, each drawing new '
                     'numbers (median time, median ESS).')
flags.DEFINE_integer('tfp_numpy_max_batch', 64, 'Largest B for TFP\'s NumPy '
                     'VM (228 s at B=1024).')
flags.DEFINE_boolean('tfp_vm_nuts', True, 'Time TFP\'s autobatched NUTS '
                     'on TFP\'s VM beside ours in the NUTS cells (with '
                     'TFP installed).  Its first call on each TensorFlow '
                     'backend traces and compiles TFP\'s VM, for longer '
                     'than any other step of a quick run, so --quick leaves '
                     'it out.')
flags.DEFINE_string('out', os.path.join(HERE, 'results'),
                    'Directory for results.md and results.png.')
flags.DEFINE_boolean('one_process', False, 'Measure every workload and '
                     'backend in this process, instead of each (workload, '
                     'backend) in a fresh one.  Faster to start, but one '
                     'backend\'s leftovers slow the next: after graph-mode '
                     'runs, XLA runs of every system here took 20% longer, '
                     'and after a full run TFP\'s autobatched NUTS 5x.')
flags.DEFINE_boolean('memory_processes', True, 'Measure the peak memory '
                     'of each TensorFlow cell in a fresh process of its own '
                     '(`processes.measure_memory_in_a_process`); without, '
                     'the TensorFlow rows have no peak memory.')
flags.DEFINE_boolean('nuts_systems', False, 'After the run, run '
                     'benchmarks/nuts_systems.py too (TFP\'s NUTS program '
                     'on our VM beside its hand-batched sampler, BlackJAX '
                     'and NumPyro; with --quick, its quick form), into '
                     '--out/nuts_systems.')
flags.DEFINE_string('worker', None, 'Internal: measure --workloads on '
                    '--backends in this process and write the rows as JSON '
                    'to this path.')
flags.DEFINE_string('memory_worker', None, 'Internal: measure the peak '
                    'memory of the first of --workloads on the first of '
                    '--backends at --memory_batch in this process (started '
                    'with TF_CPU_ALLOCATOR_USE_BFC=true) and write it as '
                    'JSON to this path.')
flags.DEFINE_integer('memory_batch', 1, 'Internal: see --memory_worker.')


# --quick: the values of the flags not given on the command line.  A quick
# run checks an install: every workload and backend once, at a small size
# (`cells.batch_sizes`), in one process, since each fresh process imports
# TensorFlow and traces every program again.  Most of a quick run is our
# own programs' first calls (tracing, XLA compilation), NUTS's above all.
# TFP's baselines run where they are cheap: its VM on fibonacci under
# tf.function and XLA, its hand-batched NUTS; not its NumPy VM (seconds a
# call at B=64) nor its autobatched NUTS (--tfp_vm_nuts), whose first
# calls trace TFP's VM for longer than the rest of a quick run.
QUICK = dict(one_process=True, repeats=2, nuts_repeats=2, min_seconds=0.0,
             max_repeats=2, alone_seconds=0.2, schedule_batch=0,
             nuts_ess_samples=0, nuts_processes=1, memory_processes=False,
             tfp_numpy_max_batch=0, tfp_vm_nuts=False)


def apply_quick():
  """Under --quick, sets each flag of `QUICK` that the command line did not
  give."""
  workloads.apply_quick(FLAGS, QUICK)
