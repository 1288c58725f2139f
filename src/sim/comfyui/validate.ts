import { NODE_CLASSES } from './catalogue.js';
import { type Input, inputExtra, inputType, type NodeClass } from './nodes.js';

/**
 * ComfyUI's prompt validation (`execution.validate_prompt` / `validate_inputs`), as a pure function
 * over the simulated node catalogue: the same error types, messages, details and shapes, including
 * its quirks (an output whose only fault is upstream contributes nothing to `details`).
 */

export interface NodeErrorEntry {
  type: string;
  message: string;
  details: string;
  extra_info: Record<string, unknown>;
}

export interface NodeErrors {
  [id: string]: { errors: NodeErrorEntry[]; dependent_outputs: string[]; class_type: string };
}

export interface PromptNode {
  class_type: string;
  inputs: Record<string, unknown>;
}
export type Prompt = Record<string, PromptNode>;

export type Validation =
  | { ok: true; prompt: Prompt; outputs: string[]; nodeErrors: NodeErrors }
  | { ok: false; error: NodeErrorEntry; nodeErrors: NodeErrors };

export interface ValidationContext {
  /** The current choices of a combo input (installed model files, fixed options). */
  choices(input: Input): readonly (string | number)[] | undefined;
  /** Whether LoadImage's `image` names a file that exists (ComfyUI's `exists_annotated_filepath`). */
  imageExists(name: string): boolean;
}

/** A Python exception raised while validating, turned into an `exception_during_*` error. */
class PythonError extends Error {
  constructor(
    readonly pythonType: string,
    message: string,
  ) {
    super(message);
  }
}

/** Python's `repr` of a value as ComfyUI prints it in `details`. */
export function pyRepr(value: unknown): string {
  if (typeof value === 'string') {
    const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
    const body = value.replaceAll('\\', '\\\\').replaceAll('\n', '\\n');
    return quote + (quote === "'" ? body.replaceAll("'", "\\'") : body) + quote;
  }
  if (value === null || value === undefined) return 'None';
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  if (Array.isArray(value)) return `[${value.map(pyRepr).join(', ')}]`;
  return String(value);
}

/** Python's `str()` of a number: floats keep a `.0`. */
const pyNumber = (value: number, float: boolean) =>
  float && Number.isInteger(value) ? value.toFixed(1) : String(value);

const isLink = (value: unknown): value is unknown[] => Array.isArray(value);

type Result = [valid: boolean, errors: NodeErrorEntry[], id: string];

export function validatePrompt(raw: Record<string, unknown>, context: ValidationContext): Validation {
  // ComfyUI converts widget values in place; work on a copy so the caller's object stays as sent.
  const prompt = structuredClone(raw) as Prompt;
  const outputs: string[] = [];
  for (const [id, node] of Object.entries(prompt)) {
    const classType = (node as Partial<PromptNode> | null)?.class_type;
    if (typeof classType !== 'string') {
      return fail(
        {
          type: 'missing_node_type',
          message: `Node 'ID #${id}' has no class_type. The workflow may be corrupted or a custom node is missing.`,
          details: `Node ID '#${id}'`,
          extra_info: { node_id: id, class_type: null, node_title: null },
        },
        {},
      );
    }
    const nodeClass = NODE_CLASSES[classType];
    if (!nodeClass) {
      return fail(
        {
          type: 'missing_node_type',
          message: `Node '${classType}' not found. The custom node may not be installed.`,
          details: `Node ID '#${id}'`,
          extra_info: { node_id: id, class_type: classType, node_title: classType },
        },
        {},
      );
    }
    if (typeof node.inputs !== 'object' || node.inputs === null) node.inputs = {};
    if (nodeClass.output) outputs.push(id);
  }
  if (outputs.length === 0) {
    return fail(
      { type: 'prompt_no_outputs', message: 'Prompt has no outputs', details: '', extra_info: {} },
      {},
    );
  }

  const validated = new Map<string, Result>();
  const validateNode = (id: string, visiting: string[]): Result => {
    const known = validated.get(id);
    if (known) return known;
    const node = prompt[id] as PromptNode;
    if (visiting.includes(id)) {
      const path = [...visiting.slice(visiting.indexOf(id)), id];
      const cycle = [...new Set(path)];
      const details = path.map((n) => `${n} (${prompt[n]?.class_type})`).join(' -> ');
      for (const member of cycle) {
        validated.set(member, [
          false,
          [
            {
              type: 'dependency_cycle',
              message: 'Dependency cycle detected',
              details,
              extra_info: { node_id: member, cycle_nodes: cycle },
            },
          ],
          member,
        ]);
      }
      return validated.get(id) as Result;
    }
    const nodeClass = NODE_CLASSES[node.class_type] as NodeClass;
    const errors: NodeErrorEntry[] = [];
    let valid = true;
    const declared: [string, Input, boolean][] = [
      ...Object.entries(nodeClass.required).map(([k, v]): [string, Input, boolean] => [k, v, true]),
      ...Object.entries(nodeClass.optional ?? {}).map(([k, v]): [string, Input, boolean] => [k, v, false]),
    ];
    for (const [name, input, required] of declared) {
      if (!(name in node.inputs)) {
        if (required) {
          errors.push({
            type: 'required_input_missing',
            message: 'Required input is missing',
            details: name,
            extra_info: { input_name: name },
          });
        }
        continue;
      }
      const choices = context.choices(input);
      // ComfyUI's `input_config`: the type and the options object, tooltip included.
      const info = [inputType(nodeClass, input, choices), inputExtra(nodeClass, input, choices)];
      let value = node.inputs[name];
      if (isLink(value)) {
        if (value.length !== 2) {
          errors.push({
            type: 'bad_linked_input',
            message: 'Bad linked input, must be a length-2 list of [node_id, slot_index]',
            details: name,
            extra_info: { input_name: name, input_config: info, received_value: value },
          });
          continue;
        }
        const [from, slot] = value as [unknown, unknown];
        const source = prompt[String(from)];
        if (!source) throw new PythonError('KeyError', pyRepr(from));
        const returned = NODE_CLASSES[source.class_type]?.outputs ?? [];
        const received = typeof slot === 'number' ? returned[slot] : undefined;
        if (received === undefined) throw new PythonError('IndexError', 'tuple index out of range');
        if (input.kind === 'type' && !typesMatch(received, input.type)) {
          errors.push({
            type: 'return_type_mismatch',
            message: 'Return type mismatch between linked nodes',
            details: `${name}, received_type(${received}) mismatch input_type(${input.type})`,
            extra_info: { input_name: name, input_config: info, received_type: received, linked_node: value },
          });
          continue;
        }
        try {
          if (!validateNode(String(from), [...visiting, id])[0]) valid = false;
        } catch (error) {
          valid = false;
          const ex = asPython(error);
          validated.set(String(from), [
            false,
            [
              {
                type: 'exception_during_inner_validation',
                message: 'Exception when validating inner node',
                details: ex.message,
                extra_info: {
                  input_name: name,
                  input_config: info,
                  exception_message: ex.message,
                  exception_type: ex.pythonType,
                  traceback: [],
                  linked_node: value,
                },
              },
            ],
            String(from),
          ]);
        }
        continue;
      }
      if (typeof value === 'object' && value !== null && '__value__' in value) {
        value = (value as { __value__: unknown }).__value__;
        node.inputs[name] = value;
      }
      if (input.kind === 'type') {
        const converted = convert(value, input.type);
        if ('problem' in converted) {
          errors.push({
            type: 'invalid_input_type',
            message: `Failed to convert an input value to a ${input.type} value`,
            details: `${name}, ${typeof value === 'string' ? value : pyRepr(value)}, ${converted.problem}`,
            extra_info: {
              input_name: name,
              input_config: info,
              received_value: value,
              exception_message: converted.problem,
            },
          });
          continue;
        }
        value = converted.value;
        node.inputs[name] = value;
      }
      if (nodeClass.customValidation?.includes(name)) continue;
      const float = input.kind === 'type' && input.type === 'FLOAT';
      const { min, max } = input.extra as { min?: number; max?: number };
      if (typeof value === 'number' && min !== undefined && value < min) {
        errors.push({
          type: 'value_smaller_than_min',
          message: `Value ${pyNumber(value, float)} smaller than min of ${pyNumber(min, float)}`,
          details: name,
          extra_info: { input_name: name, input_config: info, received_value: value },
        });
        continue;
      }
      if (typeof value === 'number' && max !== undefined && value > max) {
        errors.push({
          type: 'value_bigger_than_max',
          message: `Value ${pyNumber(value, float)} bigger than max of ${pyNumber(max, float)}`,
          details: name,
          extra_info: { input_name: name, input_config: info, received_value: value },
        });
        continue;
      }
      if (choices && !choices.includes(value as string | number)) {
        // ComfyUI does not send back long lists such as hundreds of scanned model files.
        const long = choices.length > 20;
        errors.push({
          type: 'value_not_in_list',
          message: 'Value not in list',
          details: `${name}: ${pyRepr(value)} not in ${long ? `(list of length ${choices.length})` : pyRepr([...choices])}`,
          extra_info: { input_name: name, input_config: long ? null : info, received_value: value },
        });
      }
    }
    if (node.class_type === 'LoadImage' && 'image' in node.inputs) {
      const image = String(node.inputs.image);
      if (!context.imageExists(image)) {
        errors.push({
          type: 'custom_validation_failed',
          message: 'Custom validation failed for node',
          details: `image - Invalid image file: ${image}`,
          extra_info: { input_name: 'image' },
        });
      }
    }
    const before = validated.get(id) ?? [true, [], id];
    const result: Result = [
      before[0] && valid && errors.length === 0,
      [...before[1], ...errors.filter((e) => !before[1].includes(e))],
      id,
    ];
    validated.set(id, result);
    return result;
  };

  const good: string[] = [];
  const failures: [string, NodeErrorEntry[]][] = [];
  const nodeErrors: NodeErrors = {};
  for (const output of outputs) {
    let valid: boolean;
    let reasons: NodeErrorEntry[];
    try {
      [valid, reasons] = validateNode(output, []);
    } catch (error) {
      const ex = asPython(error);
      valid = false;
      reasons = [
        {
          type: 'exception_during_validation',
          message: 'Exception when validating node',
          details: ex.message,
          extra_info: { exception_type: ex.pythonType, traceback: [] },
        },
      ];
      validated.set(output, [false, reasons, output]);
    }
    if (valid) {
      good.push(output);
      continue;
    }
    failures.push([output, reasons]);
    // As ComfyUI does: every invalid node with reasons seen so far lists this output as dependent.
    for (const [id, [nodeValid, nodeReasons]] of validated) {
      if (nodeValid || nodeReasons.length === 0) continue;
      nodeErrors[id] ??= {
        errors: nodeReasons,
        dependent_outputs: [],
        class_type: (prompt[id] as PromptNode).class_type,
      };
      nodeErrors[id].dependent_outputs.push(output);
    }
  }
  if (good.length === 0) {
    return fail(
      {
        type: 'prompt_outputs_failed_validation',
        message: 'Prompt outputs failed validation',
        details: failures.flatMap(([, errors]) => errors.map((e) => `${e.message}: ${e.details}`)).join('\n'),
        extra_info: {},
      },
      nodeErrors,
    );
  }
  return { ok: true, prompt, outputs: good, nodeErrors };
}

const fail = (error: NodeErrorEntry, nodeErrors: NodeErrors): Validation => ({
  ok: false,
  error,
  nodeErrors,
});

function asPython(error: unknown): PythonError {
  return error instanceof PythonError ? error : new PythonError('Exception', String(error));
}

/** ComfyUI's `validate_node_input`: equal types, a wildcard, or a union that covers the received type. */
function typesMatch(received: string, expected: string): boolean {
  if (received === expected || received === '*' || expected === '*') return true;
  const want = new Set(expected.split(','));
  return received.split(',').every((t) => want.has(t));
}

/** Python's int()/float()/str()/bool() on a JSON value, or the exception message it would raise. */
function convert(value: unknown, type: string): { value: unknown } | { problem: string } {
  switch (type) {
    case 'INT': {
      if (typeof value === 'boolean') return { value: value ? 1 : 0 };
      if (typeof value === 'number' && Number.isFinite(value)) return { value: Math.trunc(value) };
      if (typeof value === 'string' && /^\s*[+-]?\d+\s*$/.test(value)) return { value: Number(value) };
      if (typeof value === 'string')
        return { problem: `invalid literal for int() with base 10: ${pyRepr(value)}` };
      return {
        problem: `int() argument must be a string, a bytes-like object or a real number, not '${pyTypeName(value)}'`,
      };
    }
    case 'FLOAT': {
      if (typeof value === 'boolean') return { value: value ? 1 : 0 };
      if (typeof value === 'number') return { value };
      if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value)))
        return { value: Number(value) };
      if (typeof value === 'string')
        return { problem: `could not convert string to float: ${pyRepr(value)}` };
      return { problem: `float() argument must be a string or a real number, not '${pyTypeName(value)}'` };
    }
    case 'STRING':
      return { value: typeof value === 'string' ? value : JSON.stringify(value) };
    case 'BOOLEAN':
      return { value: Boolean(value) };
    default:
      return { value };
  }
}

const pyTypeName = (value: unknown) =>
  value === null
    ? 'NoneType'
    : Array.isArray(value)
      ? 'list'
      : typeof value === 'object'
        ? 'dict'
        : typeof value;
