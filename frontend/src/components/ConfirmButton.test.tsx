import { MantineProvider } from "@mantine/core";
import { fireEvent, render, screen } from "@testing-library/react";
import { describe, expect, test, vi } from "vitest";
import { ConfirmButton } from "./ConfirmButton";
import { ProblemAlert } from "./Loadable";
import { ApiError } from "../api/client";

describe("ConfirmButton", () => {
  test("acts only after the confirmation, which says what happens", async () => {
    const onConfirm = vi.fn();
    render(
      <MantineProvider>
        <ConfirmButton label="Cancel order" title="Cancel this order?" message="Its GPUs are released." confirmLabel="Yes, cancel" onConfirm={onConfirm} />
      </MantineProvider>,
    );
    fireEvent.click(screen.getByRole("button", { name: "Cancel order" }));
    expect(await screen.findByText("Its GPUs are released.")).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Keep it" }));
    expect(onConfirm).not.toHaveBeenCalled();

    fireEvent.click(screen.getByRole("button", { name: "Cancel order" }));
    fireEvent.click(await screen.findByRole("button", { name: "Yes, cancel" }));
    expect(onConfirm).toHaveBeenCalledTimes(1);
  });
});

describe("ProblemAlert", () => {
  test("shows the server's detail, not a generic failure", () => {
    render(
      <MantineProvider>
        <ProblemAlert error={new ApiError(422, { detail: "quota exceeded: 64 of 64 H100 GPUs in use", code: "quota_exceeded" })} />
      </MantineProvider>,
    );
    expect(screen.getByRole("alert").textContent).toContain("quota exceeded: 64 of 64 H100 GPUs in use");
  });
});
