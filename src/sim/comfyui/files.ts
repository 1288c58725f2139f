import { createHash } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join, normalize, resolve, sep } from 'node:path';

/**
 * The simulated runner's input, output and temp directories (one temporary tree per simulator,
 * removed on close), with ComfyUI's rules for uploads (`name (1).ext` on a clash unless the content
 * is the same), annotated names (`x.png [output]`), `GET /view` path checks and save-file naming
 * (`prefix_00001_.webm`).
 */

export type FolderType = 'input' | 'output' | 'temp';
const FOLDER_TYPES: readonly string[] = ['input', 'output', 'temp'];

const CONTENT_TYPES: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
  '.gif': 'image/gif',
  '.webm': 'video/webm',
  '.mp4': 'video/mp4',
  '.mkv': 'video/x-matroska',
  '.json': 'application/json',
  '.txt': 'text/plain',
};

export const contentTypeOf = (filename: string) =>
  CONTENT_TYPES[extname(filename).toLowerCase()] ?? 'application/octet-stream';

const inside = (dir: string, path: string) => path === dir || path.startsWith(dir + sep);

const sha256 = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

export interface UploadFields {
  image?: File;
  type?: string;
  subfolder?: string;
  overwrite?: string;
}

export type ViewResult =
  | { status: 400 | 403 | 404 }
  | { status: 200; path: string; filename: string; contentType: string };

export class SimFiles {
  private constructor(readonly root: string) {}

  static async create(): Promise<SimFiles> {
    const root = await mkdtemp(join(tmpdir(), 'kiln-comfy-sim-'));
    await Promise.all([...FOLDER_TYPES, 'scratch'].map((type) => mkdir(join(root, type))));
    return new SimFiles(root);
  }

  /** Working files no route serves (generated stand-ins for missing input images). */
  get scratch(): string {
    return join(this.root, 'scratch');
  }

  dir(type: FolderType): string {
    return join(this.root, type);
  }

  /** ComfyUI's `annotated_filepath`: a trailing ` [input]`, ` [output]` or ` [temp]` picks the folder. */
  private annotated(name: string): { name: string; type?: FolderType } {
    for (const type of ['output', 'input', 'temp'] as const) {
      const suffix = ` [${type}]`;
      if (name.endsWith(suffix)) return { name: name.slice(0, -suffix.length), type };
    }
    return { name };
  }

  /** The file LoadImage's `image` value names (input folder unless annotated), or undefined if absent. */
  imagePath(value: string): string | undefined {
    const { name, type } = this.annotated(value);
    const dir = this.dir(type ?? 'input');
    const path = resolve(dir, name);
    if (!inside(dir, path)) return undefined;
    return existsSync(path) && statSync(path).isFile() ? path : undefined;
  }

  /** LoadImage's combo: the image files at the top of the input folder, sorted. */
  inputImages(): string[] {
    return readdirSync(this.dir('input'), { withFileTypes: true })
      .filter((entry) => entry.isFile() && contentTypeOf(entry.name).startsWith('image/'))
      .map((entry) => entry.name)
      .sort();
  }

  /** `POST /upload/image`: the JSON answer, or the bare status ComfyUI gives a bad request. */
  async upload(
    fields: UploadFields,
  ): Promise<{ status: 200; body: Record<string, string> } | { status: 400 }> {
    const image = fields.image;
    if (!image?.name) return { status: 400 };
    const type = fields.type || 'input';
    if (!FOLDER_TYPES.includes(type)) return { status: 400 };
    const base = this.dir(type as FolderType);
    const subfolder = fields.subfolder ?? '';
    const folder = join(base, normalize(subfolder || '.'));
    let filename = image.name;
    let path = resolve(folder, filename);
    if (!inside(base, path)) return { status: 400 };
    await mkdir(dirname(path), { recursive: true });

    const data = new Uint8Array(await image.arrayBuffer());
    let duplicate = false;
    if (fields.overwrite !== 'true' && fields.overwrite !== '1') {
      const ext = extname(image.name);
      const stem = image.name.slice(0, image.name.length - ext.length);
      for (let i = 1; existsSync(path); i++) {
        if (sha256(await readFile(path)) === sha256(data)) {
          duplicate = true;
          break;
        }
        filename = `${stem} (${i})${ext}`;
        path = join(folder, filename);
      }
    }
    if (!duplicate) await writeFile(path, data);
    return { status: 200, body: { name: filename, subfolder, type } };
  }

  /** `GET /view`'s checks, in ComfyUI's order. */
  view(query: URLSearchParams): ViewResult {
    const requested = query.get('filename');
    if (requested === null) return { status: 404 };
    const annotated = this.annotated(requested);
    const filename = annotated.name;
    if (!filename) return { status: 400 };
    if (filename.startsWith('/') || filename.includes('..')) return { status: 400 };
    const type = annotated.type ?? query.get('type') ?? 'output';
    if (!FOLDER_TYPES.includes(type)) return { status: 400 };
    let dir = this.dir(type as FolderType);
    const subfolder = query.get('subfolder');
    if (subfolder !== null) {
      const full = resolve(dir, subfolder);
      if (!inside(dir, full)) return { status: 403 };
      dir = full;
    }
    const path = join(dir, basename(filename));
    if (!existsSync(path) || !statSync(path).isFile()) return { status: 404 };
    return { status: 200, path, filename: basename(filename), contentType: contentTypeOf(filename) };
  }

  /**
   * ComfyUI's `get_save_image_path`: `kiln/ltx-video` saves into subfolder `kiln` as
   * `ltx-video_<counter>_.<ext>`, the counter one past the highest already there.
   */
  async savePath(
    type: 'output' | 'temp',
    prefix: string,
    width: number,
    height: number,
  ): Promise<{ folder: string; filename: string; subfolder: string; counter: number }> {
    const expanded = prefix.replaceAll('%width%', String(width)).replaceAll('%height%', String(height));
    const normalized = normalize(expanded);
    const base = this.dir(type);
    const subfolder = dirname(normalized) === '.' ? '' : dirname(normalized);
    const filename = basename(normalized);
    const folder = resolve(base, subfolder);
    if (!inside(base, folder)) {
      throw new Error(
        `**** ERROR: Saving image outside the output folder is not allowed.\n full_output_folder: ${folder}\n         output_dir: ${base}`,
      );
    }
    await mkdir(folder, { recursive: true });
    let counter = 1;
    for (const existing of readdirSync(folder)) {
      if (!existing.startsWith(`${filename}_`)) continue;
      const digits = /^(\d+)/.exec(existing.slice(filename.length + 1))?.[1];
      if (digits) counter = Math.max(counter, Number(digits) + 1);
    }
    return { folder, filename, subfolder, counter };
  }

  async close(): Promise<void> {
    await rm(this.root, { recursive: true, force: true });
  }
}
