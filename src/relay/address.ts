/**
 * The source address of a relay connection: the remote IP of its socket, written
 * one way, so that counts per address (connection caps, fair shares) see one peer once.
 */
import { isIP } from 'node:net';

const MAPPED_IPV4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** An IPv4-mapped IPv6 address as IPv4, IPv6 in lower case; `unknown` once the socket is gone. */
export function normalizeAddress(address: string | undefined): string {
  if (address === undefined || address === '') return 'unknown';
  const mapped = MAPPED_IPV4.exec(address);
  if (mapped !== null) return mapped[1]!;
  return address.toLowerCase();
}

/** 127.0.0.0/8 and ::1 (also IPv4-mapped): a peer on this machine. */
export function isLoopbackAddress(address: string): boolean {
  const ip = normalizeAddress(address);
  if (isIP(ip) === 4) return ip.startsWith('127.');
  return ip === '::1' || ip === '0:0:0:0:0:0:0:1';
}

/** A host name or address that only this machine reaches. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || isLoopbackAddress(host);
}
