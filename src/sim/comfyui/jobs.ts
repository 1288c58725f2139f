import type { HistoryEntry, PromptQueue } from './queue.js';

/** `GET /api/jobs/{id}`: ComfyUI's unified job view (`comfy_execution/jobs.py`), None fields left out. */
export function jobView(queue: PromptQueue, promptId: string): Record<string, unknown> | undefined {
  const found = queue.locate(promptId);
  if (!found) return undefined;
  if (found.state !== 'history') {
    const { item } = found;
    return prune({
      id: item.promptId,
      status: found.state === 'running' ? 'in_progress' : 'pending',
      priority: item.number,
      create_time: item.extraData.create_time,
      outputs_count: 0,
      previewable_outputs_count: 0,
      workflow: { prompt: item.prompt, extra_data: item.extraData },
    });
  }
  const { entry } = found;
  const [priority, , prompt, extraData] = entry.prompt;
  let start: unknown;
  let end: unknown;
  let error: unknown;
  let interrupted = false;
  for (const [event, data] of entry.status.messages) {
    if (event === 'execution_start') start = data.timestamp;
    else if (
      event === 'execution_success' ||
      event === 'execution_error' ||
      event === 'execution_interrupted'
    ) {
      end = data.timestamp;
      if (event === 'execution_error') error = data;
      if (event === 'execution_interrupted') interrupted = true;
    }
  }
  const files = outputFiles(entry);
  return prune({
    id: promptId,
    status: entry.status.status_str === 'success' ? 'completed' : interrupted ? 'cancelled' : 'failed',
    priority,
    create_time: extraData.create_time,
    execution_start_time: start,
    execution_end_time: end,
    execution_error: error,
    outputs_count: files.length,
    previewable_outputs_count: files.length,
    preview_output: files[0],
    outputs: entry.outputs,
    execution_status: entry.status,
    workflow: { prompt, extra_data: extraData },
  });
}

function outputFiles(entry: HistoryEntry): Record<string, unknown>[] {
  return Object.entries(entry.outputs).flatMap(([node, output]) =>
    Object.entries(output)
      .filter(([key, items]) => key !== 'animated' && Array.isArray(items))
      .flatMap(([mediaType, items]) =>
        (items as Record<string, unknown>[]).map((item) => ({ ...item, nodeId: node, mediaType })),
      ),
  );
}

const prune = (object: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(object).filter(([, value]) => value !== undefined && value !== null));
