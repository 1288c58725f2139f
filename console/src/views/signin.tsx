import { useState } from 'preact/hooks';
import { ApiError, api, type Session, storeKey } from '../api.js';

/** Sign in with an API key; it is kept for this tab only. */
export function SignIn({ onSignedIn, notice }: { onSignedIn: (session: Session) => void; notice?: string }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const session = await api<Session>('GET', '/api/v1/session', undefined, key.trim());
      storeKey(key.trim());
      onSignedIn(session);
      if (!location.hash) location.hash = '#/jobs';
    } catch (caught) {
      setError(
        caught instanceof ApiError && caught.status === 401
          ? 'That key was not accepted: check it, or ask an operator for a new one.'
          : (caught as Error).message,
      );
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <h1>Kiln console</h1>
      {notice && <p role="alert">{notice}</p>}
      <p>Sign in with a Kiln API key. It is kept in this tab only, and forgotten when the tab closes.</p>
      <form onSubmit={submit}>
        <label for="key">API key</label>
        <input
          id="key"
          name="key"
          type="password"
          autocomplete="off"
          placeholder="kiln_sk_…"
          required
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
        />
        <button type="submit" disabled={busy}>
          Sign in
        </button>
        {error && <p role="alert">{error}</p>}
      </form>
    </main>
  );
}
