// One version per npm package across the repository's JS projects. Each project (bench,
// examples/workers, pkg, tests/*) keeps its own package.json and lockfile so that it installs
// alone; this check makes a package pinned in several of them (miniflare, wrangler, typescript,
// ioredis, …) agree everywhere, and each lockfile install what its package.json pins.
// Exits 1 listing every disagreement.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";

const root = join(dirname(new URL(import.meta.url).pathname), "..");
const manifests = execFileSync("git", ["ls-files", "*package.json"], { cwd: root, encoding: "utf8" })
  .split("\n")
  .filter((f) => f.endsWith("package.json"));

const pins = new Map(); // package name -> Map(spec -> [files])
const problems = [];
for (const file of manifests) {
  const manifest = JSON.parse(readFileSync(join(root, file), "utf8"));
  const lockPath = join(root, dirname(file), "package-lock.json");
  const lock = existsSync(lockPath) ? JSON.parse(readFileSync(lockPath, "utf8")) : null;
  for (const field of ["dependencies", "devDependencies", "optionalDependencies"]) {
    for (const [name, spec] of Object.entries(manifest[field] ?? {})) {
      if (spec.startsWith("file:")) continue;
      if (!/^(npm:[^@]+@)?\d+\.\d+\.\d+(-[\w.]+)?$/.test(spec.replace(/^npm:@/, "npm:"))) {
        problems.push(`${file}: ${name} is "${spec}", not an exact version`);
      }
      if (!pins.has(name)) pins.set(name, new Map());
      const specs = pins.get(name);
      specs.set(spec, [...(specs.get(spec) ?? []), file]);
      const installed = lock?.packages?.[`node_modules/${name}`]?.version;
      const wanted = spec.replace(/^npm:(@?[^@]+)@/, "");
      if (lock && installed !== wanted) {
        problems.push(`${dirname(file)}/package-lock.json installs ${name} ${installed ?? "(nothing)"}, package.json pins ${wanted}`);
      }
    }
  }
}
for (const [name, specs] of pins) {
  if (specs.size > 1) {
    const where = [...specs].map(([spec, files]) => `${spec} in ${files.join(", ")}`).join("; ");
    problems.push(`${name} is pinned differently: ${where}`);
  }
}
if (problems.length > 0) {
  console.error(`npm pins disagree:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`npm pins: ${pins.size} packages across ${manifests.length} package.json files agree`);
