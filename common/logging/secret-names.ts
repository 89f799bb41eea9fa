// Which names hold secrets. Two kinds: a secret name (DB_PASSWORD, API_KEY, GITHUB_TOKEN,
// client_secret...) whose whole value is hidden, and a connection name (DATABASE_URL, REDIS_URI,
// SENTRY_DSN...) whose value is shown with the credentials inside it hidden.

// A secret word anywhere in the name, or a short one (key, pass, pwd, auth, pin, salt) as its
// last part after a separator: STRIPE_KEY and DB_PASS are secrets, KEYBOARD and BYPASS are not.
const SECRET_NAME =
  /passw(?:or)?d|passwd|passphrase|secret|token|credential|authorization|cookie|api[_.-]?key|apikey|private[_.-]?key|access[_.-]?key|session[_.-]?key|signing[_.-]?key|encryption[_.-]?key|[_.-](?:key|pass|pwd|auth|pin|salt)$/i;

// Names that match the pattern but hold no secret: paging cursors and lease counters of the API.
const NOT_SECRET = new Set(["page_token", "next_page_token", "fencing_token", "pagetoken", "nextpagetoken", "fencingtoken"]);

const CONNECTION_NAME = /(?:^|[_.-])(?:url|uri|dsn|conn|connection|connection[_.-]?string|conn[_.-]?str)$|database_url|dsn/i;

/** True when a key name looks like it holds a secret (its whole value is hidden). */
export function isSecretKey(key: string): boolean {
  return SECRET_NAME.test(key) && !NOT_SECRET.has(key.toLowerCase());
}

/** True when a key name looks like a connection string (DATABASE_URL, *_DSN): its credentials are hidden. */
export function isConnectionKey(key: string): boolean {
  return CONNECTION_NAME.test(key);
}

/** Loose pre-check for a secret name inside text, confirmed by isSecretKey. */
export const SECRET_NAME_IN_TEXT =
  "[A-Za-z0-9_.-]*(?:passw|passphrase|secret|token|credential|authorization|cookie|key|pass|pwd|auth|pin|salt)[A-Za-z0-9_.-]*";
