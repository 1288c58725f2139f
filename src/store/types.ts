/** Records as the store hands them out. Times are Unix epoch milliseconds. */

export type Tier = 'free' | 'standard';
export type Role = 'member' | 'admin';

export interface Org {
  id: string;
  name: string;
  created_at: number;
}

export interface ApiKey {
  id: string;
  org_id: string;
  org_name: string;
  /** The first characters of the key, enough to recognise it in a list; never the whole key. */
  prefix: string;
  name: string | null;
  tier: Tier;
  role: Role;
  created_at: number;
  revoked_at: number | null;
}

export interface ContextMeta {
  id: string;
  org_id: string;
  name: string;
  description: string | null;
  size_bytes: number;
  sha256: string;
  version: number;
  created_at: number;
  updated_at: number;
  created_by: string;
}

export interface Context extends ContextMeta {
  content: string;
}

export interface Page<T> {
  data: T[];
  has_more: boolean;
}
