/**
 * The folder rule of DESIGN.md "Architecture": no folder of src/ imports back up. Every
 * relative import of every src file is read with TypeScript's own pre-parser, and no
 * cycle may run between folders: neither between the top-level folders (a folder's
 * subfolders count as the folder) nor between the subfolders of one folder (hosts/claude
 * and hosts/codex). DESIGN.md's architecture table is checked against the tree too.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

/** One import from one folder of src/ to another, and a file that makes it. */
interface FolderImport {
  from: string;
  to: string;
  file: string;
}

/** A file's folder under src/, with `/` separators; '.' for src/ itself. */
function folderOf(path: string): string {
  const folder = relative(SRC, dirname(path)).split(/[\\/]/).join('/');
  return folder === '' ? '.' : folder;
}

function topLevel(folder: string): string {
  return folder.split('/')[0]!;
}

function isWithin(folder: string, ancestor: string): boolean {
  return folder === ancestor || folder.startsWith(`${ancestor}/`);
}

/** Every import, export-from and dynamic import of a relative path in src/, between two different folders. */
function folderImports(): FolderImport[] {
  const files = readdirSync(SRC, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.ts'))
    .map((name) => join(SRC, name));
  const found: FolderImport[] = [];
  for (const file of files) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    for (const { fileName } of importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const from = folderOf(file);
      const to = folderOf(resolve(dirname(file), fileName));
      if (from !== to) found.push({ from, to, file: relative(SRC, file) });
    }
  }
  return found;
}

/** The edges that lie on a cycle of the graph, each as "from -> to (file)". */
function edgesOnCycles(edges: readonly FolderImport[]): string[] {
  const next = new Map<string, Set<string>>();
  for (const { from, to } of edges) next.set(from, (next.get(from) ?? new Set()).add(to));
  const reaches = (start: string, goal: string): boolean => {
    const seen = new Set<string>();
    const stack = [start];
    while (stack.length > 0) {
      const node = stack.pop()!;
      if (node === goal) return true;
      if (seen.has(node)) continue;
      seen.add(node);
      stack.push(...(next.get(node) ?? []));
    }
    return false;
  };
  return [...new Set(edges.filter((e) => reaches(e.to, e.from)).map((e) => `${e.from} -> ${e.to} (${e.file})`))].sort();
}

/** Imports between top-level folders: a subfolder's imports are its folder's. */
function betweenTopLevelFolders(imports: readonly FolderImport[]): FolderImport[] {
  return imports.map((i) => ({ ...i, from: topLevel(i.from), to: topLevel(i.to) })).filter((i) => i.from !== i.to);
}

/** Imports between two subfolders of one top-level folder, neither inside the other. */
function betweenSubfolders(imports: readonly FolderImport[]): FolderImport[] {
  return imports.filter((i) => topLevel(i.from) === topLevel(i.to) && !isWithin(i.from, i.to) && !isWithin(i.to, i.from));
}

describe('the folder rule', () => {
  it('finds the edges of a cycle, and none in a graph without one', () => {
    const edge = (from: string, to: string): FolderImport => ({ from, to, file: `${from}/x.ts` });
    expect(edgesOnCycles([edge('a', 'b'), edge('b', 'c'), edge('c', 'a'), edge('c', 'd')])).toEqual(['a -> b (a/x.ts)', 'b -> c (b/x.ts)', 'c -> a (c/x.ts)']);
    expect(edgesOnCycles([edge('a', 'b'), edge('b', 'c'), edge('a', 'c')])).toEqual([]);
    expect(betweenTopLevelFolders([edge('cli/commands', 'cli'), edge('cli', 'agent')]).map((e) => `${e.from}>${e.to}`)).toEqual(['cli>agent']);
    expect(betweenSubfolders([edge('hosts/claude', 'hosts/codex'), edge('mcp/tools', 'mcp'), edge('hosts/codex', 'agent')]).map((e) => `${e.from}>${e.to}`)).toEqual(['hosts/claude>hosts/codex']);
  });

  it('reads the imports of src/, type-only ones too', () => {
    const edges = new Set(folderImports().map((i) => `${i.from}>${i.to}`));
    // Known imports: a value import, a type-only one, and one from a subfolder.
    expect(edges).toContain('cli/commands>hosts/codex');
    expect(edges).toContain('hosts/codex>agent');
    expect(edges).toContain('mcp/tools>hosts/claude');
  });

  it('has no cycle between top-level folders of src/', () => {
    expect(edgesOnCycles(betweenTopLevelFolders(folderImports()))).toEqual([]);
  });

  it('has no cycle between the subfolders of one folder (the host adapters)', () => {
    expect(edgesOnCycles(betweenSubfolders(folderImports()))).toEqual([]);
  });
});

describe("DESIGN.md's architecture table", () => {
  const design = readFileSync(new URL('../../DESIGN.md', import.meta.url), 'utf8');
  const section = design.slice(design.indexOf('## Architecture'), design.indexOf('\n## ', design.indexOf('## Architecture') + 1));
  /** The first cell of each row, split on commas: `agent/`, `errors.ts`, … */
  const rows = new Set(
    [...section.matchAll(/^\| ([^|]+) \|/gm)]
      .flatMap((m) => m[1]!.split(','))
      .map((cell) => cell.trim().replace(/`/g, ''))
      .filter((cell) => cell !== 'folder' && !cell.startsWith('---')),
  );

  it('has a row for every folder and top-level file of src/, and none for anything that is gone', () => {
    const tree = readdirSync(SRC, { withFileTypes: true }).map((e) => (e.isDirectory() ? `${e.name}/` : e.name));
    expect([...rows].sort()).toEqual(tree.sort());
  });

  it('names only files that exist', () => {
    // Every `name.ts` in a folder's row is a file of that folder (or of one of its subfolders).
    const missing: string[] = [];
    for (const m of section.matchAll(/^\| `([a-z-]+)\/` \| (.*)$/gm)) {
      const files = new Set(readdirSync(join(SRC, m[1]!), { recursive: true, encoding: 'utf8' }).map((f) => f.split(/[\\/]/).pop()!));
      for (const named of m[2]!.matchAll(/`([a-z-]+\.ts)`/g)) if (!files.has(named[1]!)) missing.push(`${m[1]}/: ${named[1]}`);
    }
    expect(missing).toEqual([]);
  });
});
