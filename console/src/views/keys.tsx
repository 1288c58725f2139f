import { useState } from 'preact/hooks';
import { api, when } from '../api.js';
import { usePoll } from '../hooks.js';

interface Org {
  id: string;
  name: string;
  created_at: number;
}
interface Key {
  id: string;
  org: string;
  prefix: string;
  name: string | null;
  tier: string;
  role: string;
  created_at: number;
  revoked_at: number | null;
}

/** Organisations and keys (admin keys): create, list, revoke. A new key is shown once, here. */
export function KeysView() {
  const orgs = usePoll(() => api<{ data: Org[] }>('GET', '/admin/v1/orgs'), [], 10_000);
  const keys = usePoll(() => api<{ data: Key[] }>('GET', '/admin/v1/keys'), [], 10_000);
  const [orgName, setOrgName] = useState('');
  const [keyOrg, setKeyOrg] = useState('');
  const [keyName, setKeyName] = useState('');
  const [tier, setTier] = useState('standard');
  const [role, setRole] = useState('member');
  const [created, setCreated] = useState<string>();
  const [error, setError] = useState<string>();

  const attempt = async (work: () => Promise<void>) => {
    setError(undefined);
    try {
      await work();
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  const createOrg = (event: Event) => {
    event.preventDefault();
    return attempt(async () => {
      await api('POST', '/admin/v1/orgs', { name: orgName });
      setOrgName('');
      orgs.refresh();
    });
  };
  const createKey = (event: Event) => {
    event.preventDefault();
    return attempt(async () => {
      const made = await api<{ key: string }>('POST', '/admin/v1/keys', {
        org: keyOrg,
        tier,
        role,
        ...(keyName ? { name: keyName } : {}),
      });
      setCreated(made.key);
      setKeyName('');
      keys.refresh();
    });
  };
  const revoke = (id: string) =>
    attempt(async () => {
      await api('DELETE', `/admin/v1/keys/${encodeURIComponent(id)}`);
      keys.refresh();
    });

  return (
    <section aria-labelledby="keys-title">
      <h1 id="keys-title">Keys and organisations</h1>
      {error && <p role="alert">{error}</p>}
      <div class="columns">
        <form class="card" onSubmit={createOrg} aria-labelledby="new-org-title">
          <h2 id="new-org-title">New organisation</h2>
          <label for="org-name">Name</label>
          <input id="org-name" required value={orgName} onInput={(e) => setOrgName(e.currentTarget.value)} />
          <button type="submit">Create organisation</button>
        </form>
        <form class="card" onSubmit={createKey} aria-labelledby="new-key-title">
          <h2 id="new-key-title">New key</h2>
          <label for="key-org">Organisation</label>
          {/* No default: a key, maybe an admin key, goes to the organisation the admin chose. */}
          <select id="key-org" required value={keyOrg} onChange={(e) => setKeyOrg(e.currentTarget.value)}>
            <option value="" disabled>
              Choose an organisation
            </option>
            {orgs.value?.data.map((o) => (
              <option key={o.id}>{o.name}</option>
            ))}
          </select>
          <label for="key-name">Name (optional)</label>
          <input id="key-name" value={keyName} onInput={(e) => setKeyName(e.currentTarget.value)} />
          <label for="key-tier">Tier</label>
          <select id="key-tier" value={tier} onChange={(e) => setTier(e.currentTarget.value)}>
            <option>standard</option>
            <option>free</option>
          </select>
          <label for="key-role">Role</label>
          <select id="key-role" value={role} onChange={(e) => setRole(e.currentTarget.value)}>
            <option>member</option>
            <option>admin</option>
          </select>
          <button type="submit">Create key</button>
          {created && (
            <p role="status" class="secret">
              The new key, shown this once: <code data-testid="new-key">{created}</code>
            </p>
          )}
        </form>
      </div>
      <h2>Organisations</h2>
      <ul>
        {orgs.value?.data.map((o) => (
          <li key={o.id}>
            {o.name} <small>(since {when(o.created_at)})</small>
          </li>
        ))}
      </ul>
      <h2>Keys</h2>
      <table>
        <thead>
          <tr>
            <th scope="col">Key</th>
            <th scope="col">Organisation</th>
            <th scope="col">Name</th>
            <th scope="col">Tier</th>
            <th scope="col">Role</th>
            <th scope="col">Created</th>
            <th scope="col">State</th>
          </tr>
        </thead>
        <tbody>
          {keys.value?.data.map((k) => (
            <tr key={k.id}>
              <td>
                <code>{k.prefix}…</code>
              </td>
              <td>{k.org}</td>
              <td>{k.name ?? '—'}</td>
              <td>{k.tier}</td>
              <td>{k.role}</td>
              <td>{when(k.created_at)}</td>
              <td>
                {k.revoked_at ? (
                  `revoked ${when(k.revoked_at)}`
                ) : (
                  <button type="button" onClick={() => revoke(k.id)} aria-label={`Revoke key ${k.prefix}`}>
                    Revoke
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
