import { MantineProvider } from "@mantine/core";
import { render, screen } from "@testing-library/react";
import { describe, expect, test } from "vitest";
import { AccessPanel } from "./OrderDetail";

describe("AccessPanel", () => {
  test("an instance on a Slurm region names the job that holds it and the command that opens a shell in it", () => {
    const command = "srun --jobid=412 --overlap --pty bash";
    render(
      <MantineProvider>
        <AccessPanel access={{ driver: "slurm", hosts: [{ node: "gpu001", host: "gpu001", ssh: null, ports: [] }], slurm: { job_id: 412, command } }} />
      </MantineProvider>,
    );
    expect(screen.getByText(/Slurm job 412 holds it/)).toBeTruthy();
    expect(screen.getByText(command).tagName).toBe("CODE");
    expect(screen.getByRole("table", { name: "Access" }).textContent).toContain("gpu001");
  });
});
