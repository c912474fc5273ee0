"""Profiles of batched runs: where the time goes and how full the batch is.

    result = fn(x, profile=True)          # stack VM; times every block
    print(fn.last_stats.table())          # or profiler.format_table(stats)
    profiler.plot(fn.last_stats, 'profile.png')   # needs matplotlib

Per basic block: the user's function and source line it came from, how
often it ran, members active per run, utilization (active / batch size),
and time (with `profile=True`; under XLA, which has no clock in the
loop, from `ab.stage(fn, jit_compile=True).profile_blocks(*args)`).  A
block with many runs and low utilization is where divergence costs most:
members reach it at different steps, so it runs again and again for a few
of them.  The guide
(docs/guide.md) explains how to fix that.
"""

import os

__all__ = ['rows', 'summary', 'format_table', 'plot']


def rows(stats):
  """Tabulates the profile: one dict per executed block.

  Args:
    stats: The `RunStats` of a run (`fn.last_stats`).

  Returns:
    A list of dicts, most expensive first (by time where the run was
    timed, else by runs), with keys `block`, `function`, `where`, `source`,
    `runs`, `active_per_run`, `utilization`, `seconds` and `time_share`.

  Raises:
    ArgumentError: If the statistics are tensors of a `tf.function` being
      traced.
  """
  stats.require_numbers('profiler.rows()')
  out = []
  total_time = sum(stats.block_time.values()) or 0.0
  for label, runs in stats.block_executions.items():
    if not runs:
      continue
    loc = stats.block_loc.get(label)
    active = stats.block_active.get(label, 0)
    seconds = stats.block_time.get(label)
    out.append(dict(
        block=label,
        function=loc.function if loc else '',
        where=(f'{os.path.basename(loc.filename)}:{loc.line}' if loc else ''),
        source=(loc.source_line.strip() if loc and loc.source_line else ''),
        runs=runs,
        active_per_run=active / runs,
        utilization=(active / stats.rows(label) if stats.rows(label)
                     else 0.0),
        seconds=seconds,
        time_share=(seconds / total_time if seconds is not None and
                    total_time else None)))
  key = (lambda r: -r['seconds']) if stats.block_time else (
      lambda r: -r['runs'])
  return sorted(out, key=key)


def summary(stats):
  """Summarizes a run in a line or two.

  Args:
    stats: The `RunStats` of a run.

  Returns:
    The steps, batch size, utilization, time in blocks and (with
    `profile=True`) how the steps compare with the longest member alone.
  """
  what = 'blocks run (stackless mode)' if stats.stackless else 'VM steps'
  line = (f'{stats.steps} {what}, batch {stats.batch_size}, mean '
          f'utilization {stats.utilization:.1%}'
          + (f', {sum(stats.block_time.values()):.4f} s in blocks'
             if stats.block_time else ''))
  longest = getattr(stats, 'longest_member_blocks', None)
  if longest and stats.block_rows:
    line += (f'\nlongest member alone: {longest} blocks; stackless mode '
             f'ran its independent calls together in {stats.steps} steps')
  elif longest:
    line += (f'\nlongest member alone: {longest} blocks, so at least '
             f'{longest} steps under any schedule; this run took '
             f'{stats.schedule_overhead:.2f}x that')
  return line


def format_table(stats, max_rows=30):
  """Formats the profile as a fixed-width text table with a summary line.

  Args:
    stats: The `RunStats` of a run.
    max_rows: The most blocks shown (the most expensive ones).

  Returns:
    The table, a string.

  Raises:
    ArgumentError: If the statistics are tensors of a `tf.function` being
      traced.
  """
  lines = [summary(stats)]
  header = (f'{"block":<22} {"runs":>7} {"active":>8} {"util":>6} '
            f'{"time s":>8} {"time%":>6}  source')
  lines.append(header)
  lines.append('-' * len(header))
  for r in rows(stats)[:max_rows]:
    t = f'{r["seconds"]:.4f}' if r['seconds'] is not None else '-'
    share = (f'{r["time_share"]:.0%}' if r['time_share'] is not None
             else '-')
    source = f'{r["where"]} {r["source"]}'[:60]
    lines.append(f'{r["block"][:22]:<22} {r["runs"]:>7} '
                 f'{r["active_per_run"]:>8.1f} {r["utilization"]:>6.0%} '
                 f'{t:>8} {share:>6}  {source}')
  return '\n'.join(lines)


def plot(stats, path=None, max_rows=20):
  """Draws a bar chart of time (or runs) per block, colored by utilization.

  Needs matplotlib (`pip install matplotlib`).

  Args:
    stats: The `RunStats` of a run.
    path: A file to save the chart to, or None.
    max_rows: The most blocks shown (the most expensive ones).

  Returns:
    The matplotlib figure.

  Raises:
    ImportError: If matplotlib is not installed.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    if path is not None:
      matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError('profiler.plot needs matplotlib: pip install '
                      'matplotlib') from e
  data = rows(stats)[:max_rows][::-1]
  timed = bool(stats.block_time)
  values = [r['seconds'] if timed else r['runs'] for r in data]
  labels = [f'{r["block"]}  ({r["where"]})' for r in data]
  colors = plt.cm.RdYlGn([r['utilization'] for r in data])
  fig, ax = plt.subplots(figsize=(9, 0.4 * len(data) + 1.5))
  ax.barh(range(len(data)), values, color=colors)
  ax.set_yticks(range(len(data)))
  ax.set_yticklabels(labels, fontsize=8)
  ax.set_xlabel('seconds' if timed else 'executions')
  overhead = getattr(stats, 'schedule_overhead', None)
  ax.set_title(f'{stats.steps} steps'
               + (f' ({overhead:.2f}x the longest member)' if overhead
                  else '')
               + f', batch {stats.batch_size}, '
               f'utilization {stats.utilization:.0%} (color: red = low)')
  fig.tight_layout()
  if path is not None:
    fig.savefig(path, dpi=100)
  return fig
