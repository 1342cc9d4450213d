/**
 * `pairing/<identity>/<session>.json`: open requests both ways and the control messages
 * not yet accepted by a relay (rules.ts). A schema-validated state file: every change runs
 * a pure transition under the file's sidecar lock and is durable (atomic replacement,
 * synced) before it returns; a damaged file is moved aside and reported.
 */
import { readJson, updateJson } from '../store/json-store.js';
import { emptyPairing, pairingFileSchema, type Change, type PairingData } from './rules.js';

/** What stops working while a pairing store is damaged (said with every report of it). */
export const PAIRING_UNAVAILABLE = 'the pairing requests it held are not shown and cannot be accepted, and its unsent pairing messages are not sent';
const storeOptions = { unavailable: PAIRING_UNAVAILABLE };

export class PairingStore {
  constructor(readonly path: string) {}

  async read(): Promise<PairingData> {
    return (await readJson(this.path, pairingFileSchema, emptyPairing, storeOptions)).value;
  }

  /** Runs `transition` on the current data under the lock; writes what it returns. */
  async update<R>(transition: (data: PairingData) => Change<R>): Promise<R> {
    const { value } = await updateJson(this.path, pairingFileSchema, emptyPairing, (current) => {
      const change = transition(current);
      return { next: change.next, result: { value: change.result } };
    }, storeOptions);
    return value;
  }
}
