import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, onKeyRejected, type Session, storedKey, storeKey } from './api.js';
import { useRoute } from './hooks.js';
import { ContextsView } from './views/contexts.js';
import { FleetView } from './views/fleet.js';
import { JobView } from './views/job.js';
import { JobsView } from './views/jobs.js';
import { KeysView } from './views/keys.js';
import { PlaygroundView } from './views/playground.js';
import { SignIn } from './views/signin.js';
import { UsageView } from './views/usage.js';

const VIEWS = [
  { path: 'jobs', label: 'Jobs', admin: false },
  { path: 'playground', label: 'Playground', admin: false },
  { path: 'contexts', label: 'Contexts', admin: false },
  { path: 'usage', label: 'Usage', admin: false },
  { path: 'fleet', label: 'Fleet', admin: true },
  { path: 'keys', label: 'Keys', admin: true },
];

function App() {
  const [session, setSession] = useState<Session | null>(null);
  const [checking, setChecking] = useState(Boolean(storedKey()));
  const [checkFailed, setCheckFailed] = useState<string>();
  const [signedOutBecause, setSignedOutBecause] = useState<string>();
  const route = useRoute();

  // A key revoked while the page is open: every view would fail from then on, so sign out.
  useEffect(
    () =>
      onKeyRejected(() => {
        setSession(null);
        setSignedOutBecause(
          'Your key is no longer valid: it was revoked, or is unknown. Sign in with another key.',
        );
      }),
    [],
  );

  // A key kept from earlier in this tab: check it is still good before showing anything. Only a
  // 401 forgets it (onKeyRejected says why); a gateway restarting or a proxy's error page is asked
  // again until it answers.
  useEffect(() => {
    if (!storedKey()) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const check = () =>
      api<Session>('GET', '/api/v1/session')
        .then((checked) => {
          setSession(checked);
          setChecking(false);
        })
        .catch((error: Error) => {
          if (!storedKey()) return setChecking(false);
          setCheckFailed(`The gateway could not check your key (${error.message}); trying again…`);
          timer = setTimeout(check, 2000);
        });
    check();
    return () => clearTimeout(timer);
  }, []);

  if (checking) return <p class="loading">{checkFailed ?? 'Checking your key…'}</p>;
  if (!session)
    return (
      <SignIn
        notice={signedOutBecause}
        onSignedIn={(signedIn) => {
          setSignedOutBecause(undefined);
          setSession(signedIn);
        }}
      />
    );

  const admin = session.key.role === 'admin';
  const [view = 'jobs', id] = route;
  const known = VIEWS.find((v) => v.path === view && (admin || !v.admin));
  const signOut = () => {
    storeKey(null);
    setSession(null);
    location.hash = '';
  };

  return (
    <>
      <header class="top">
        <a class="brand" href="#/jobs">
          Kiln
        </a>
        <nav aria-label="Console">
          <ul>
            {VIEWS.filter((v) => admin || !v.admin).map((v) => (
              <li key={v.path}>
                <a href={`#/${v.path}`} aria-current={view === v.path ? 'page' : undefined}>
                  {v.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <p class="who">
          {session.org.name} · {session.key.role} key {session.key.prefix}…{' '}
          <button type="button" class="link" onClick={signOut}>
            Sign out
          </button>
        </p>
      </header>
      <main>
        {!known ? (
          <p role="alert">There is no such page here.</p>
        ) : view === 'jobs' && id ? (
          <JobView id={id} />
        ) : view === 'jobs' ? (
          <JobsView />
        ) : view === 'playground' ? (
          <PlaygroundView />
        ) : view === 'contexts' ? (
          <ContextsView session={session} />
        ) : view === 'usage' ? (
          <UsageView />
        ) : view === 'fleet' ? (
          <FleetView />
        ) : (
          <KeysView />
        )}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app') as HTMLElement);
