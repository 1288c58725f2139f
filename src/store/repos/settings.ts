import { KilnError } from '../../errors.js';
import type { SqlExecutor } from '../driver.js';

/** Named values every process sharing the store must agree on, such as the file URL signing secret. */
export class SettingsRepository {
  constructor(private readonly db: SqlExecutor) {}

  async get(name: string): Promise<string | undefined> {
    const row = await this.db.get<{ value: string }>('SELECT value FROM settings WHERE name = ?', [name]);
    return row?.value;
  }

  /** Stores `value`, replacing the setting's value if it has one. */
  async set(name: string, value: string): Promise<void> {
    await this.db.run(
      'INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value',
      [name, value],
    );
  }

  /**
   * Stores `value` unless the setting exists, and answers the value in force. When several processes
   * race, one insert wins (the others' DO NOTHING waits for it to commit) and all read the winner's value.
   */
  async ensure(name: string, value: string): Promise<string> {
    await this.db.run('INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING', [
      name,
      value,
    ]);
    const stored = await this.get(name);
    if (stored === undefined)
      throw new KilnError('internal-error', `setting '${name}' vanished right after it was stored`);
    return stored;
  }
}
