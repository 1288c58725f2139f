import { useState } from 'preact/hooks';
import { ApiError, api, type Session, when } from '../api.js';
import { usePoll } from '../hooks.js';
import { Pages } from './pages.js';

interface Context {
  id: string;
  name: string;
  description: string | null;
  size_bytes: number;
  version: number;
  updated_at: number;
  content?: string;
}

const utf8Bytes = (text: string) => new TextEncoder().encode(text).length;

/** Whether every line of `text` ends with CRLF (and at least one does). */
const crlfOnly = (text: string) => text.includes('\r\n') && !/(^|[^\r])\n/.test(text);

/** A draft's content as it is saved: its line endings those of the version it edits. */
const contentOf = (draft: Draft) => (draft.crlf ? draft.content.replace(/\r?\n/g, '\r\n') : draft.content);

/**
 * A context being written. `base` is the ETag of the version it replaces (an edit's, or the one a
 * refused save found); without one, a save creates only. `existing` is that version, once a save
 * was refused for it: the form then asks before replacing it.
 */
interface Draft {
  name: string;
  content: string;
  isNew: boolean;
  /**
   * The version edited ends its lines with CRLF: a textarea gives back LF alone, so the save puts
   * the CR back rather than rewrite every line of it.
   */
  crlf?: boolean;
  base?: string;
  existing?: Context;
}

/** A context's ETag, as the API gives it: its id and version. */
const etagOf = (c: Pick<Context, 'id' | 'version'>) => `"${c.id}.${c.version}"`;

/** The organisation's contexts: search by prefix, view, create, edit (a new version), delete. */
export function ContextsView({ session }: { session: Session }) {
  const [prefix, setPrefix] = useState('');
  // The last name of each page gone past: the page shown starts after the last of them.
  const [cursors, setCursors] = useState<string[]>([]);
  const after = cursors.at(-1);
  const [open, setOpen] = useState<Context | null>(null);
  const [editing, setEditing] = useState<Draft | null>(null);
  const [notice, setNotice] = useState<string>();
  const [error, setError] = useState<string>();
  const [confirming, setConfirming] = useState(false);
  const list = usePoll(
    () =>
      api<{ data: Context[]; has_more: boolean }>(
        'GET',
        `/api/v1/contexts?${new URLSearchParams({ limit: '100', ...(prefix ? { prefix } : {}), ...(after ? { after } : {}) })}`,
      ),
    [prefix, after],
    5000,
  );
  const rows = list.value?.data ?? [];
  const next = list.value?.has_more ? rows.at(-1)?.name : undefined;
  const cap = session.contexts_max_bytes;

  const show = async (name: string) => {
    setError(undefined);
    setEditing(null);
    setConfirming(false);
    try {
      setOpen(await api<Context>('GET', `/api/v1/contexts/${encodeURIComponent(name)}`));
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  const save = async (event: Event) => {
    event.preventDefault();
    if (!editing) return;
    setError(undefined);
    try {
      // Never a teammate's work replaced unseen: a new context is created only, an edit replaces only
      // the version it started from, and a refusal shows what is there and asks before replacing it.
      const saved = await api<Context>(
        'POST',
        '/api/v1/contexts',
        { name: editing.name, content: contentOf(editing) },
        undefined,
        editing.base ? { 'if-match': editing.base } : { 'if-none-match': '*' },
      );
      // The saved version, shown at once with the content just sent: reading it back would show the
      // version before it, beside this notice, until the read came back.
      setOpen({ ...saved, content: contentOf(editing) });
      setEditing(null);
      setConfirming(false);
      setNotice(`Saved ${saved.name}, version ${saved.version}.`);
      list.refresh();
    } catch (caught) {
      const current = caught instanceof ApiError && caught.status === 412 ? caught.body?.context : undefined;
      if (current) {
        const existing = current as Context;
        return setEditing({ ...editing, base: etagOf(existing), existing });
      }
      // Deleted since the edit began: saving again creates it anew.
      if (caught instanceof ApiError && caught.code === 'context-changed') {
        setEditing({ ...editing, base: undefined, existing: undefined });
      }
      setError((caught as Error).message);
    }
  };
  const remove = async () => {
    if (!open) return;
    try {
      // The context shown, at the version shown: not one a teammate has since made under its name,
      // nor a version of theirs saved since (412, said in the alert).
      await api('DELETE', `/api/v1/contexts/${encodeURIComponent(open.id)}`, undefined, undefined, {
        'if-match': etagOf(open),
      });
      setNotice(`Deleted ${open.name}.`);
      setOpen(null);
      setConfirming(false);
      list.refresh();
    } catch (caught) {
      setError((caught as Error).message);
    }
  };

  const size = editing ? utf8Bytes(contentOf(editing)) : 0;
  return (
    <section aria-labelledby="contexts-title">
      <h1 id="contexts-title">Contexts</h1>
      <div class="filters">
        <label>
          Names starting with{' '}
          <input
            type="search"
            value={prefix}
            onInput={(e) => {
              setPrefix(e.currentTarget.value);
              setCursors([]);
            }}
          />
        </label>
        <button
          type="button"
          onClick={() => {
            setOpen(null);
            setEditing({ name: '', content: '', isNew: true });
          }}
        >
          New context
        </button>
      </div>
      {notice && <p role="status">{notice}</p>}
      {error && <p role="alert">{error}</p>}
      <div class="columns">
        <div>
          {list.error && <p role="alert">The contexts could not be listed: {list.error.message}</p>}
          {list.value && rows.length === 0 && <p>No contexts{prefix ? ` starting with “${prefix}”` : ''}.</p>}
          {rows.length > 0 && (
            <table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Version</th>
                  <th scope="col">Size</th>
                  <th scope="col">Updated</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((c) => (
                  <tr key={c.id}>
                    <td>
                      <button type="button" class="link" onClick={() => show(c.name)}>
                        {c.name}
                      </button>
                    </td>
                    <td>{c.version}</td>
                    <td>
                      {c.size_bytes} B ({((c.size_bytes / cap) * 100).toFixed(1)}% of cap)
                    </td>
                    <td>{when(c.updated_at)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <Pages
            cursors={cursors}
            setCursors={setCursors}
            next={next}
            back="Previous contexts"
            on="Next contexts"
          />
        </div>
        <div>
          {open && !editing && (
            <article class="card" aria-labelledby="context-name">
              <h2 id="context-name">{open.name}</h2>
              <p>
                Version <span data-testid="context-version">{open.version}</span> · {open.size_bytes} of {cap}{' '}
                bytes · updated {when(open.updated_at)}
              </p>
              <pre class="content">{open.content}</pre>
              <button
                type="button"
                onClick={() =>
                  setEditing({
                    name: open.name,
                    content: open.content ?? '',
                    isNew: false,
                    base: etagOf(open),
                    crlf: crlfOnly(open.content ?? ''),
                  })
                }
              >
                Edit
              </button>{' '}
              {confirming ? (
                <button type="button" class="danger" onClick={remove}>
                  Confirm delete
                </button>
              ) : (
                <button type="button" onClick={() => setConfirming(true)}>
                  Delete
                </button>
              )}
            </article>
          )}
          {editing && (
            <form class="card" onSubmit={save} aria-labelledby="edit-title">
              <h2 id="edit-title">{editing.isNew ? 'New context' : `Edit ${editing.name}`}</h2>
              {editing.isNew && (
                <>
                  <label for="context-name-input">Name</label>
                  <input
                    id="context-name-input"
                    required
                    pattern="[A-Za-z0-9._\/\-]+"
                    value={editing.name}
                    onInput={(e) =>
                      setEditing({
                        ...editing,
                        name: e.currentTarget.value,
                        base: undefined,
                        existing: undefined,
                      })
                    }
                  />
                </>
              )}
              <label for="context-content">Content</label>
              <textarea
                id="context-content"
                rows={12}
                value={editing.content}
                onInput={(e) => setEditing({ ...editing, content: e.currentTarget.value })}
              />
              <p class={size > cap ? 'over' : ''}>
                {size} of {cap} bytes{size > cap ? ': too large to save' : ''}
              </p>
              {editing.existing &&
                (editing.isNew ? (
                  <p role="alert">
                    A context named {editing.name} already exists (version {editing.existing.version}).
                    Replacing it makes your text its version {editing.existing.version + 1}; or choose another
                    name.
                  </p>
                ) : (
                  <p role="alert">
                    {editing.name} has changed since you began this edit: it is at version{' '}
                    {editing.existing.version} now, saved {when(editing.existing.updated_at)}. Replacing it
                    makes your text its version {editing.existing.version + 1}; Cancel keeps theirs.
                  </p>
                ))}
              <button type="submit" disabled={size > cap}>
                {editing.existing ? `Replace ${editing.name}` : 'Save'}
              </button>{' '}
              <button type="button" onClick={() => setEditing(null)}>
                Cancel
              </button>
            </form>
          )}
        </div>
      </div>
    </section>
  );
}
