// Headless Firefox through geckodriver's WebDriver, for the browser tests: one driver process and
// one session for the length of `use(webdriver, session)`, both ended whatever `use` does.
// `webdriver(method, path, body)` is one WebDriver call, answering its `value`; `session` is
// the session's path prefix (`/session/<id>`).
import { spawn } from "node:child_process";

const GECKODRIVER = process.env.GECKODRIVER_BIN ?? `${process.env.HOME}/.cargo/bin/geckodriver`;

export async function withFirefox(use) {
  const port = 4444 + Math.floor(Math.random() * 1000);
  const driver = spawn(GECKODRIVER, ["--port", String(port), "--host", "127.0.0.1"], { stdio: "ignore" });
  const webdriver = async (method, path, body) => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      method,
      headers: { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = await response.json();
    if (!response.ok) throw new Error(`WebDriver ${method} ${path}: ${JSON.stringify(json.value)}`);
    return json.value;
  };
  try {
    // The driver answers /status once it listens: up to 10 s.
    for (let i = 0; ; i++) {
      try {
        await webdriver("GET", "/status");
        break;
      } catch (error) {
        if (i > 100) throw error;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const { sessionId } = await webdriver("POST", "/session", {
      capabilities: { alwaysMatch: { "moz:firefoxOptions": { args: ["-headless"] } } },
    });
    const session = `/session/${sessionId}`;
    try {
      return await use(webdriver, session);
    } finally {
      await webdriver("DELETE", session);
    }
  } finally {
    driver.kill();
  }
}
